"""Chapter 07's full-size experiments fit every GPU memory tier; quick and tiny sizes are small."""

import pytest

from utils.lessons.experiment_sizes import ch07
from utils.lessons.sizes import TIERS, tier_budget


@pytest.mark.parametrize("tier", TIERS)
def test_full_size_footprints_fit_every_tier(tier):
    footprints = ch07.footprints(tier)
    assert len(footprints) >= 5
    for name, nbytes in footprints.items():
        assert 0 < nbytes <= tier_budget(tier), f"{name}: {nbytes / 2**30:.2f} GiB on the {tier} GiB tier"


def test_sizes_and_bad_tier():
    assert ch07.gpt_config("tiny").n_layer == 1 and ch07.gpt_config("quick").d_model == 64
    assert ch07.gpt_config("full").seq_len == 1024
    assert ch07.FRAG_SURVIVOR_BYTES > 2**20  # the large pool (issue 12, bug 12)
    with pytest.raises(ValueError, match="tier"):
        ch07.footprints(12)
