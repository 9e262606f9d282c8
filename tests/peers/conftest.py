"""The peers' vendored test files are theirs to run, in their own venv (suites.py): never part of ours."""

collect_ignore = ["vendored"]
