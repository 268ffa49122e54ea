"""What a learner's code DOES in a check's scenario, as plain data: the half of a check that runs where the
learner's code runs.

A check that judges what the learner's function does to the objects it is handed (a model's gradients, BatchNorm's
statistics, a scaler's state, the forwards an accumulation runs) is split in two. Its SCENE (here) builds the
scenario from the case (seeds, a model, a batch), calls the learner's function, and returns what happened as plain
data (utils.course.checks.wire). The check (utils.course.checks.chNN) runs the same scene with its reference and
compares (`utils.course.checks.core.observe`). In a grading kernel the scene runs in the grader's answer process,
which holds the learner's code and no check (grading/runner.py), so no reference, truth function or expected value
is in reach of the learner's code while it runs; the comparison happens in the grader's own process.

These modules therefore hold no reference, truth or expected value, and import nothing from the check modules
(tests/test_grading_replay.py reads their imports).
"""
