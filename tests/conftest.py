"""Shared test settings: tests run on the CPU, quick size, never writing reference results."""

import os

os.environ.setdefault("COURSE_SIZE", "quick")
os.environ.setdefault("COURSE_RECORD", "0")
os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("COURSE_CHECKS_STRICT", "1")  # nbval: a solution that fails its own check fails
