"""The GPU memory course's plumbing: measuring, timing, capability gates, sizes, results, widgets, labs.

Lessons live in the notebooks; these modules measure, time, plot and check. Import what you need by
name, e.g. `from utils.measure import saved_activation_bytes`.
"""
