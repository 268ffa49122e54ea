"""Chunked linear-cross-entropy: same loss and gradients, and the saved bytes measured (CPU, small model)."""

import pytest
import torch
import torch.nn.functional as F

from utils.lessons.chunked_loss import chunked_cross_entropy, logits_saved_bytes
from utils.lessons.measure import SavedTensorCounter


def _inputs(tokens=512, d=32, vocab=2000):
    torch.manual_seed(0)
    hidden = torch.randn(2, tokens // 2, d, requires_grad=True)
    weight = torch.randn(vocab, d, requires_grad=True)
    targets = torch.randint(0, vocab, (2, tokens // 2))
    targets[0, :5] = -100
    return hidden, weight, targets


def test_same_loss_and_gradients():
    hidden, weight, targets = _inputs()
    plain = F.cross_entropy((hidden @ weight.t()).flatten(0, 1), targets.flatten(), ignore_index=-100)
    g_plain = torch.autograd.grad(plain, (hidden, weight))
    chunked = chunked_cross_entropy(hidden, weight, targets, chunk_tokens=64)
    g_chunked = torch.autograd.grad(chunked, (hidden, weight))
    torch.testing.assert_close(chunked, plain)
    for a, b in zip(g_chunked, g_plain, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_saved_bytes_measured():
    """The plain loss saves the FP32 logits (tokens x V x 4 B, here 4.1 MB); the chunked one saves no logits."""
    hidden, weight, targets = _inputs()
    tokens, vocab = targets.numel(), weight.shape[0]

    def plain():
        return F.cross_entropy((hidden @ weight.t()).flatten(0, 1), targets.flatten())

    def saved(fn):
        counter = SavedTensorCounter(exclude_tensors=(hidden, weight))
        with counter.active():
            fn()
        return counter.bytes

    saved_plain = saved(plain)
    saved_chunked = saved(lambda: chunked_cross_entropy(hidden, weight, targets, 64))
    assert saved_plain >= logits_saved_bytes(tokens, vocab) == 4 * tokens * vocab
    assert saved_chunked < logits_saved_bytes(tokens, vocab, chunk_tokens=64)
    assert saved_plain - saved_chunked >= 0.95 * 4 * tokens * vocab


def test_bad_arguments():
    hidden, weight, targets = _inputs()
    with pytest.raises(ValueError, match="chunk_tokens"):
        chunked_cross_entropy(hidden, weight, targets, 0)
    with pytest.raises(ValueError, match="weight"):
        chunked_cross_entropy(hidden, weight.t(), targets)
    with pytest.raises(ValueError, match="targets"):
        chunked_cross_entropy(hidden, weight, targets[:, :3])
    with pytest.raises(TypeError, match="hidden"):
        chunked_cross_entropy([1.0], weight, targets)
    with pytest.raises(ValueError, match="tokens"):
        logits_saved_bytes(0, 10)
