"""A small transformers Llama with random weights on the GPU and its prefill + greedy decode, for
the GPU and multi-GPU tests of weave.hf (needs torch and transformers)."""
import torch
import transformers

# Every GEMM K a multiple of 128 at world 1 and 2 (blockscale): hidden 1024, 8 heads of 128 (4 KV),
# MLP 2816 (1408 = 11 x 128 per rank at world 2).
CONFIG = dict(hidden_size=1024, intermediate_size=2816, num_hidden_layers=2, num_attention_heads=8,
              num_key_value_heads=4, vocab_size=2048, max_position_embeddings=512)
BATCH, PROMPT, STEPS = 2, 48, 4


def small_llama(seed):
    """The model, bf16 on the current GPU, its weights drawn from `seed`."""
    torch.manual_seed(seed)
    with torch.device("cuda"):
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**CONFIG))
    return model.to(torch.bfloat16).eval()


def prefill_and_decode(model, ids, tokens=None):
    """Logits of a prefill of ids and STEPS decode steps with HF's KV cache, fed `tokens` (default:
    the model's greedy choice); returns (logits per call, the tokens fed)."""
    with torch.no_grad():
        out = model(ids, use_cache=True)
        logits, fed = [out.logits], []
        for i in range(STEPS):
            nxt = tokens[i] if tokens is not None else out.logits[:, -1:].argmax(-1)
            fed.append(nxt)
            out = model(nxt, past_key_values=out.past_key_values, use_cache=True)
            logits.append(out.logits)
    return logits, fed
