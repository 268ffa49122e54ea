"""Lab checks: one module per chapter, each exercise checked by a function that returns a Verdict."""
