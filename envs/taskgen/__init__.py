"""repogym.envs.taskgen: synthesise bug-fix tasks from working repositories by mutating their source.

``mutations`` finds and applies small, syntax-preserving bugs; nothing is imported here so that
using one part does not load the others.
"""
