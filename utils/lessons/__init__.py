"""The learner's library: what the chapters and labs use to measure, time, build and show (measure, timing,
models, formats, bitview, underflow, amp_trace, estimate, profiling, allocator_model, oom, chunked_loss, fsdp_demo,
distributed, plan_runs, published_peaks, widgets, plots, tables, env, sizes and time_model, which size each
chapter's experiments for a device, quiet, experiment_sizes).

Chapters also import utils.course's results and verdicts to record a run and judge its claims, and labs their
checks: that is the course's machinery, not the lesson. Where a module here packages code a chapter writes out and
explains (amp_trace for chapter 04, oom for chapter 07, the ledger for chapters 09 and 10), a test runs the
notebook's version beside it. These modules may import utils.ledger and utils.validate, never utils.course
(tests/test_package_layout.py).
"""
