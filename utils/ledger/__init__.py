"""The ledger: the arithmetic of what one training step keeps in memory, without torch.

Plain Python, the standard library and utils.validate only (tests/test_package_layout.py holds it to that), so it
answers for models of any size in a moment, and runs where torch cannot: the course website's planner page runs it in
the reader's browser (Pyodide). The estimator (utils.lessons.estimate, which traces real models) and the chapters build
on it.

- gpt: the course's GPT as a shape, chapter 01's formula for what its forward saves, the analytic step estimate;
- architectures: real models from a Hugging Face config (grouped-query attention, gated MLPs, mixture-of-experts);
- setups: the bytes per parameter of each training setup (torch.amp, pure BF16, Megatron-LM, DeepSpeed, LoRA);
- budget: what a GPU reports and what a plan may use of it;
- parallel: tensor, sequence and pipeline parallelism's activation memory and FLOPs (Korthikanti et al.);
- plan: chapter 09's budget ledger line by line, its costs, and the planner's search;
- report: a plan as chapter 09's panel and the planner page show it.

Public functions check their arguments once; what they call inside the ledger trusts them.
"""
