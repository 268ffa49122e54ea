"""Lab checks: one module per chapter, each exercise checked by a function that returns a Verdict.

A check runs the PUBLIC cases of its exercise (its verdict says "public checks passed", never that everything
passed); the grader (utils.course.grade) also runs held-out cases from grading/hidden/chNN.py, which nothing here
imports.
"""
