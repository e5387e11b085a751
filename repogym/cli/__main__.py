import sys

from repogym.cli import main

sys.exit(main())
