"""What a check cell publishes and the grader reads: kept free of torch, so that the grading command starts fast
(it starts one process per submission, and none of them needs torch; the submission's kernel imports it)."""

import re

CHECK_MIME = "application/vnd.gpu-memory-course.check+json"
STRICT_ENV = "COURSE_CHECKS_STRICT"  # "1" in the test suite: a solution whose check does not pass fails
READ_BY_HAND = "names fewer than two of the quantities it should reason with"  # marks a reasoning in the grade notes
REASONING_POINTS = 1.0  # of an exercise with a reasoning: given by hand, by the instructor who reads it


# The quantities each prediction reasons with, in the exercise's own terms (a pattern each, case-insensitive). The
# grader lists every reasoning for the instructor to read; one that names fewer than two of them is marked so.
REASONING_TERMS: dict[str, dict[str, str]] = {
    "0.4": {"view": r"\bview|slice", "copy": r"cop(y|ies)|contiguous", "bytes": r"\bbytes?\b|\bB\b",
            "element size or dtype": r"element|fp32|float32|bf16|bfloat16|dtype", "storage": r"storage|alive|keeps"},
    "1.3": {"LayerNorm": r"layer ?norm|\bnorm\b", "Linear inputs": r"linear|qkv|q/k/v|fc1|fc2|input",
            "tokens": r"token|seq|2,?048", "parallel layout": r"parallel|one layer ?norm|shared|same storage|both",
            "bytes per element": r"bytes?|fp32|float32|\b4 ?b\b",
            "attention": r"attention|sdpa|softmax|log-?sum-?exp", "GELU": r"gelu|4d|4 ?x ?d|mlp",
            "width": r"d_model|width|4,?096|hidden"},
    "2.4": {"amax": r"amax|max(imum)?\b", "standard deviations": r"standard deviation|\bsd\b|sigma|std|σ",
            "scaling": r"scal(e|ing)", "flush to zero": r"flush|underflow|zero|subnormal",
            "E4M3": r"e4m3|fp8", "Gaussian density": r"gaussian|normal|density|cdf",
            "weights": r"weight|tensor|matri(x|ces)|linear"},
    "3.1": {"overflow": r"overflow|65,?504|inf", "underflow": r"underflow|flush|subnormal|zero",
            "gradients": r"gradient", "loss scale": r"scale",
            "standard deviations": r"standard deviation|\bsd\b|sigma|σ",
            "binades": r"log2|binade|exponent|2\^", "fraction": r"fraction|percent|%|share"},
    "4.2": {"weights": r"weight|parameter", "gradients": r"gradient", "optimizer states": r"moment|adam|optimi[sz]er",
            "master copy": r"master|fp32|float32", "BF16": r"bf16|bfloat16|half", "bytes": r"bytes?|gib|\bb/",
            "8-bit codes": r"8-bit|int8|code|scale|quantiz", "Kahan buffer": r"kahan|compensat"},
    "5.2": {"segments": r"segment", "square root": r"sqrt|square root|√", "blocks": r"block|layer",
            "saved activations": r"sav(e|ed|es)|activation|input", "peak": r"peak|memory",
            "recomputation": r"recompute|checkpoint"},
    "6.2": {"eps": r"eps|epsilon", "accumulation steps": r"\bk\b|accumulat|micro-?batch",
            "gradient": r"gradient|\|g\||\bg\b", "update": r"update|step", "second moment": r"sqrt|moment|\bv\b",
            "parameters": r"parameter|weights|8b|8e9"},
    "7.2": {"attention probabilities": r"softmax|attention|probabilit", "tokens": r"token|seq|4,?096",
            "layers": r"layer", "bytes per element": r"bytes?|gib|bf16|fp32|float32",
            "logits": r"logit|vocab", "per-op terms": r"rms ?norm|swiglu|k/v|\bkv\b|gqa|head"},
    "8.2": {"blocks of 32": r"block|\b32\b", "scales": r"scale|e8m0|exponent", "bytes": r"byte|gib|\bb\b",
            "layers": r"layer", "Linear weights": r"linear|weight|q_proj|gate|\bq\b|matri",
            "FP8 codes": r"mxfp8|fp8|e4m3|code"},
    "9.2": {"rank": r"rank|\br\b", "adapters": r"adapter|lora|low-rank", "matrix sizes": r"d_in|d_out|d_model|"
            r"matri(x|ces)|dimension|width", "target modules": r"qkv|attention|target|proj|c_attn",
            "parameter count": r"parameter|count|layer"},
}


def named_quantities(reasoning: str, exercise: str) -> list[str]:
    """The quantities of `exercise` (REASONING_TERMS) that a reasoning names."""
    return [label for label, pattern in REASONING_TERMS.get(exercise, {}).items()
            if re.search(pattern, reasoning, re.IGNORECASE)]
