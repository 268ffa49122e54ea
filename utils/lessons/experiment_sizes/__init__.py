"""Each chapter's full-size experiments, one module a chapter (`chNN.py`), so that a test can check that every
full-size experiment fits every GPU memory tier (tests/test_tiers.py) and the notebook uses the same numbers.

Contract for `utils/lessons/experiment_sizes/chNN.py`:
- the constants (model shapes, batch sizes, token counts) that chapter NN uses, as `pick(quick, {tier: full})`
  values or plain per-tier dicts, imported by the notebook;
- `footprints(tier: int) -> dict[str, int]`: for each full-size experiment of the chapter, the peak bytes the
  course's own estimator (or an exact count) predicts on a GPU of that tier (16, 24, 40, 80 GiB).
"""
