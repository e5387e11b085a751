"""Task records: the SWE-bench schema plus repogym's fields, suites, and the repositories tasks point at."""

from repogym.envs.tasks.datasets import load_dataset
from repogym.envs.tasks.schema import Task, load_tasks, save_tasks
from repogym.envs.tasks.suites import list_suites, load_suite, suite_path

__all__ = ["Task", "load_tasks", "save_tasks", "load_dataset", "load_suite", "list_suites", "suite_path"]
