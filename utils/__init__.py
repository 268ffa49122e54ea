"""The GPU memory course's Python package: two halves on a shared base. Lessons live in the notebooks; this
package holds what they use and what runs the course.

The two halves:
- utils.lessons: the learner's library, what a lesson uses to measure and show: measuring, timing, models, number
  formats, the estimator, profiling, widgets, experiment sizes, and the packaged twins of code a chapter writes out
  (each tied to its notebook by a test). It imports the ledger, never the course machinery.
- utils.course: the machinery that runs the course: grading and the labs' checks, verdicts, labs, stored outputs
  and results, the website and its planner page, the lab server, hosted notebooks, the GPU check. A chapter imports
  from it only to record its results and judge its claims (results, verdicts), a lab only its checks.

The base both stand on:
- utils.ledger: the arithmetic of what a training step keeps, without torch (shapes, bytes per parameter,
  activations, parallelism, budgets, the planner's search): the standard library and utils.validate only;
- utils.validate: the argument checks every public function uses.

tests/test_package_layout.py holds these rules (and an import graph without cycles). Import what you need by name,
e.g. `from utils.lessons.measure import saved_activation_bytes`.
"""
