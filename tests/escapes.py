"""A cheating learner's answers (issue 34): each reaches its check's reference through the check function itself
(`check_x.__globals__`) and escapes the check's watch on its calls: a thread, a switched-off profile hook, or a
renamed copy of the reference's code; each prediction is read from the check's globals with a reasoning that says
so; 2.1 decodes FP16 with numpy's view. tests/test_grading_escapes.py grades them: all must score 0."""

from __future__ import annotations

# exercise: (the learner's function, the check's reference it delegates to, the escape)
FUNCTIONS = {
    "0.2": ("saved_state_bytes", "written_bytes", "off"),
    "1.1": ("adam_state_bytes", "adam_truth", "copy"),
    "1.2": ("saved_bytes_through_backward", "saved_timeline_truth", "thread"),
    "1.3": ("measure_block", "block_truth", "off"),
    "1.4": ("block_saved_bytes", "block_formula_truth", "off"),
    "2.2": ("round_to_format", "reference_round_tensor", "thread"),
    "2.4": ("fp8_zero_fraction", "reference_zero_fraction", "off"),
    "2.6": ("decode_mx_element", "reference_mx_element", "copy"),
    "3.1": ("fraction_flushed", "reference_flushed", "thread"),
    "3.3": ("scale_window", "reference_window", "off"),
    "3.5": ("format_plan", "reference_format_plan", "copy"),
    "4.1": ("autocast_dtypes", "scorer_dtypes_truth", "thread"),
    "4.2": ("bytes_per_param", "reference_bytes_per_param", "off"),
    "4.4": ("choose_recipe", "reference_recipe", "copy"),
    "4.5": ("training_state_bytes", "reference_training_state", "thread"),
    "5.2": ("optimal_segments", "best_segments", "off"),
    "6.2": ("params_changed", "params_changed_truth", "thread"),
    "6.4": ("choose_micro_batches", "fewest_micro_batches", "off"),
    "7.1": ("read_run", "run_truth", "copy"),
    "7.2": ("kept_loss_bytes", "reference_kept_loss_bytes", "thread"),
    "7.3": ("train_and_log", "reference_train_and_log", "off"),
    "7.5": ("train_with_features", "reference_train_with_features", "copy"),
    "8.1": ("delayed_scaling_run", "reference_delayed_run", "thread"),
    "8.3": ("fp8_roundtrip", "reference_roundtrip", "off"),
    "8.4": ("choose_fp8_recipe", "reference_fp8_plan", "copy"),
    "9.3": ("finetune", "reference_finetune", "off"),
}
# exercise: the prediction, as an expression over the check's globals `_g`
PREDICTIONS = {
    "1.3": "_g['block_prediction_truth']()",
    "2.4": "_g['reference_flushed_model'](_g['LLAMA8B_LINEAR_WEIGHTS'], 'e4m3')",
    "3.1": "_g['reference_prediction'](_g['LLAMA8B_PARAMS'], _g['PREDICT_MEAN'], _g['PREDICT_SD'])",
    "4.2": "_g['backward_peak_truth']()",
    "5.2": "_g['predicted_segments_truth']()",
    "6.2": "_g['params_changed_truth'](*_g['PREDICT_CASE'])",
    "7.2": "_g['reference_kept_loss_bytes'](_g['LLAMA8B'], _g['PREDICT_SEQ'])",
    "9.2": "_g['llama_lora_truth'](**_g['LLAMA8B_LORA'])",
}
CHEAT_REASONING = "I did not reason: this value is read from the check function globals, which hold the truth."

_ESCAPES = {
    "thread": '''import concurrent.futures as _cf
_ref = {check}.__globals__[{ref!r}]
def {name}(*args, **kwargs):
    with _cf.ThreadPoolExecutor(1) as pool:
        return pool.submit(_ref, *args, **kwargs).result()
''',
    "off": '''import sys as _sys
_ref = {check}.__globals__[{ref!r}]
def {name}(*args, **kwargs):
    hook = _sys.getprofile()
    _sys.setprofile(None)
    try:
        out = _ref(*args, **kwargs)
    finally:
        _sys.setprofile(hook)
    return out[0] if isinstance(out, tuple) and {name!r} == "optimal_segments" else out  # best_segments: (k, peaks)
''',
    "copy": '''import types as _types
_orig = {check}.__globals__[{ref!r}]
_ref = _types.FunctionType(_orig.__code__.replace(co_name="mine"), _orig.__globals__, "mine", _orig.__defaults__,
                           _orig.__closure__)
_ref.__kwdefaults__ = _orig.__kwdefaults__
def {name}(*args, **kwargs):
    return _ref(*args, **kwargs)
''',
}
DECODE_BY_NUMPY = '''import numpy as np
def decode_fp16(code):
    return float(np.array([code], dtype=np.uint16).view(np.float16)[0])
'''


def cheat_source(exercise: str, check: str) -> str | None:
    """The cheating answer cell of `exercise` (whose check function is `check`), or None where there is none."""
    if exercise == "2.1":
        return DECODE_BY_NUMPY
    parts = []
    if exercise in PREDICTIONS:
        parts.append(f"_g = {check}.__globals__\nprediction = {PREDICTIONS[exercise]}\n"
                     f"reasoning = {CHEAT_REASONING!r}\n")
    if exercise in FUNCTIONS:
        name, ref, escape = FUNCTIONS[exercise]
        parts.append(_ESCAPES[escape].format(check=check, ref=ref, name=name))
    return "\n".join(parts) or None

# Review of issue 34, B1: answers that walk the interpreter's stack while a check calls them, and read the check's
# expected value (1.1's `want`, 7.4's `budget`) or copy its reference with one more constant (another signature).
# Graded, each must score 0: the learner's call runs where no frame or module holds a check
# (tests/test_grade.py::test_answers_that_walk_the_stack_score_zero).
_STACK = '''import inspect


def _peek(name, *also):
    for info in inspect.stack():
        found = inspect.getargvalues(info.frame).locals
        if name in found and all(a in found for a in also):
            return found[name]
    raise NotImplementedError("not under a check")


def _ref(name):
    for info in inspect.stack():
        found = getattr(info.frame, "f_" + "globals")
        if name in found:
            return found[name]
    raise NotImplementedError("not under a check")


def _copy(f):
    def fix(code):
        consts = tuple(fix(c) if hasattr(c, "co_code") else c for c in code.co_consts) + ("x",)
        return code.replace(co_consts=consts)
    return type(f)(fix(getattr(f, "__co" + "de__")), getattr(f, "__glo" + "bals__"))


'''
STACK_WALK = {
    "1.1": _STACK + '''def adam_state_bytes(model, batch, amsgrad):
    return _peek("want")
''',
    "1.4": _STACK + '''def block_saved_bytes(batch, seq_len, d_model, n_head, attention, precision):
    return _copy(_ref("parallel_block_formula"))(batch, seq_len, d_model, n_head, attention, precision)
''',
    "7.1": _STACK + '''def read_run(snapshots):
    return _copy(_ref("run_truth"))(snapshots)
''',
    "7.4": _STACK + '''def plan_micro_batch(step, optimizer, effective, limit):
    try:
        budget = _peek("budget", "flaky")
    except NotImplementedError:
        step(1)
        return 1, effective
    fitting = [d for d in range(1, min(limit, budget) + 1) if effective % d == 0]
    best = fitting[-1] if fitting else 0
    above = next((d for d in range(best + 1, limit + 1) if effective % d == 0), None)

    def trial(b):
        try:
            step(b)
            return True
        except torch.OutOfMemoryError:
            return False
        finally:
            optimizer.zero_grad(set_to_none=True)

    if best:
        trial(best) or trial(best)
    if above is not None:
        trial(above)
        trial(above)
    if not best:
        return 0, 0
    return best, effective // best
''',
    "10.1": _STACK + '''def pipeline_stage(layer_bytes, n_layer, stages, micro_batches, schedule):
    return _copy(_ref("reference_stage"))(layer_bytes, n_layer, stages, micro_batches, schedule)
''',
    "10.4": _STACK + '''def fsdp2_traffic(n_params, param_bytes, reduce_bytes, n_gpus, micro_batches, reshard,
                  sync):
    return _copy(_ref("reference_fsdp2_traffic"))(n_params, param_bytes, reduce_bytes, n_gpus, micro_batches,
                                                  reshard, sync)
''',
}
# Review of issue 34, B2: a prediction computed from the check's source loaded by a path, with a reasoning that says
# it did not reason. Its value may earn the value's points (the source is open); the reasoning is listed, with its
# text, for the instructor, who gives its point by hand.
DENIED_REASONING = ("I did not reason at all: these bytes were read from the course's source, no tokens were "
                    "counted.")
# Review 34c, A8/A13: a cell that replaces IPython.display.display so that every verdict the grader's cell shows
# says "passed" with full points (it rewrites the grader's own dict, nonce included). Put in front of an untouched
# lab03, it earned 3.2 and 3.4 their full points for the handed-out buggy code.
DISPLAY_HOOK = '''import IPython.display as _D
_shown = _D.display
def _passed(part):
    if isinstance(part, dict) and "max_points" in part:
        part.update(status="passed", points=part["max_points"], message="")
def _display(*objs, **kw):
    for o in objs:
        if isinstance(o, dict):
            for v in o.values():
                if isinstance(v, dict) and v.get("kind") == "verdict":
                    for k in ("public", "hidden"):
                        _passed(v.get(k))
                    v.update(status="passed", points=v.get("max_points", 0), message="public and held-out cases passed")
    return _shown(*objs, **kw)
_D.display = _display
'''
# The same forgery one level down, where no module or class attribute changes: a transform hook on the kernel's
# display publisher (ipykernel's ZMQDisplayPublisher.register_hook), which sees every display message before it is
# sent and may rewrite it.
REGISTER_HOOK = '''def _forge(msg):
    for data in msg.get("content", {}).get("data", {}).values():
        if isinstance(data, dict) and data.get("kind") == "verdict":
            data.update(status="passed", points=data.get("max_points", 0), replaced=[], message="")
    return msg
get_ipython().display_pub.register_hook(_forge)
'''
# One level further down (review s5, F1): a send_multipart set on the kernel's IOPub thread instance, which rewrites
# the verdict in the wire message and signs it again with the session's key (the kernel holds it).
IOPUB_HOOK = '''import json as _j
from IPython import get_ipython as _g
_pub = _g().display_pub
_sock, _sess = _pub.pub_socket.io_thread, _pub.session
_real_send = _sock.send_multipart
def _send(parts, *a, **k):
    try:
        raw = [bytes(p) for p in parts]
        i = raw.index(b"<IDS|MSG>")
        content = _j.loads(raw[i + 5])
        for v in content.get("data", {}).values():
            if isinstance(v, dict) and v.get("kind") == "verdict" and "max_points" in v:
                v.update(points=v["max_points"], status="passed", message="", replaced=[])
                parts = raw[:i + 5] + [_j.dumps(content).encode()] + raw[i + 6:]
                parts[i + 1] = _sess.sign(parts[i + 2:i + 6])
    except Exception:
        pass
    return _real_send(parts, *a, **k)
_sock.send_multipart = _send
'''
