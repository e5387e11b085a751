"""Static code analysis of a repository: symbols, references, the reverse call graph, diff impact.

Built on tree-sitter (``tree-sitter-python``), so it reads code without importing or running it and
keeps working on files that do not parse. Resolution is static and conservative: see ``resolve.py``
for what resolves, what is reported as unresolved and what is deliberately ignored (builtins and other
libraries). ``RepoIndex.update_file`` re-parses one file incrementally; ``analyze_diff`` uses it to
index the after-state of a patch. Nothing here imports from ``envs`` except ``repogym.envs.core.errors``.
"""

from repogym.envs.analysis.impact import DiffAnalysis, analyze_diff, diff_between_revs
from repogym.envs.analysis.index import RepoIndex
from repogym.envs.analysis.model import Reference, Symbol, SyntaxIssue, Unresolved

__all__ = ["DiffAnalysis", "Reference", "RepoIndex", "Symbol", "SyntaxIssue", "Unresolved",
           "analyze_diff", "diff_between_revs"]
