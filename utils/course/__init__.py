"""The course's machinery: what runs, grades and publishes the course, not what a lesson teaches.

- grading: grade (make grade; forkserver starts its children), checks (each lab's checks, and the protocol that
  carries answers out of the learner's kernel), labs (labs generated from solutions, nbgrader);
- a run's record: results (results/ and the claims ledger), verdicts (each chapter's claims judged from its run);
- running the chapters: outputs (make outputs), gpu_check (make gpu-check), chapters (what each chapter can do on
  a device), kernels (notebooks run from code, shared with grading);
- the website: book (make book), planner_page (chapter 09's planner in the browser), glossary, navigation, workshop;
- the learner's JupyterLab: lab_server, lab_contents, lab_sessions, lab_settings; hosted (Colab, Kaggle).
"""
