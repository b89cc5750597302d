"""weave.hf on one Hopper GPU (world 1, real ops): a small transformers Llama with random weights,
its projections swapped onto weave (bf16, ptpc, blockscale, mxfp8), against the unmodified model: prefill
and greedy decode logits with HF's KV cache within weave.hf.TOLERANCE. Skipped, with the reason,
without a GPU, torch or transformers."""
import copy

import pytest

from conftest import GPU_SKIP

if GPU_SKIP:
    pytest.skip(GPU_SKIP, allow_module_level=True)
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
import weave  # noqa: E402
import weave.hf  # noqa: E402
import weave.nn  # noqa: E402
from small_llama import BATCH, CONFIG, PROMPT, prefill_and_decode, small_llama  # noqa: E402


@pytest.mark.parametrize("quant", ["bf16", "ptpc", "blockscale", "mxfp8"])
def test_a_llama_swapped_onto_weave_gives_the_unmodified_models_logits(seed, quant):
    """Every projection is the planned weave.nn layer in the quant; a prefill of 2 x 48 tokens and 4
    decode steps are within the tolerance; a call of more than max_tokens tokens is refused."""
    (comm,) = weave.Communicator.create_local([0])
    ref = small_llama(seed)
    model = copy.deepcopy(ref)
    plan = weave.hf.swap_to_weave(model, comm=comm, quant=quant, max_tokens=BATCH * PROMPT)
    for entry in plan.linears:
        layer = model.get_submodule(entry.name)
        kind = weave.nn.ColumnParallelLinear if entry.parallel == "column" else weave.nn.RowParallelLinear
        assert isinstance(layer, kind) and layer.quant == quant, entry.name
    ids = torch.randint(0, CONFIG["vocab_size"], (BATCH, PROMPT), device="cuda")
    want, tokens = prefill_and_decode(ref, ids)
    got, _ = prefill_and_decode(model, ids, tokens)
    prefill = weave.hf.logits_agreement(got[0], want[0])
    decode = weave.hf.logits_agreement(torch.cat(got[1:], 1), torch.cat(want[1:], 1))
    assert not any(torch.isnan(g).any() for g in got), "NaN logits"
    for what, agree in (("prefill", prefill), ("decode", decode)):
        assert weave.hf.within_tolerance(agree, quant), (quant, what, agree, weave.hf.TOLERANCE[quant])
    # A call of more tokens than max_tokens is refused by the row-parallel op, by name.
    with pytest.raises(weave.ArgumentError, match="m_max"), torch.no_grad():
        model(torch.zeros(BATCH, PROMPT + 1, dtype=torch.long, device="cuda"))
