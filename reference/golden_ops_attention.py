"""Goldens of varlen (THD) attention: op_attention_forward / op_attention_backward.

Each case is a pack of samples in the THD layout (rows of q[Sq,H,hd], k/v[Skv,Hkv,hd], padding
rows between the samples' slots). The reference attends over each sample's unpadded rows alone
with plain PyTorch softmax attention (kv heads repeat_interleave'd for grouped-query attention)
and takes dq, dk, dv from autograd with a random dout. Inputs are f32; the reference runs in f64
on those exact values and is stored as f32, so the C test measures its own rounding only.
Padding rows of the inputs are 0; of the outputs and gradients 0.
"""
import os

import torch

from golden_io import write_golden

# name: heads H, kv heads Hkv, head_dim, q lengths, q slot sizes, kv lengths, kv slot sizes, rows past
# the last slot (q, kv). None for kv means self-attention (kv layout = q layout).
CASES = {
    # three self-attention samples of different lengths with padding between them and at the end
    "self": dict(H=2, Hkv=2, hd=16, q_len=[5, 9, 3], q_slot=[7, 11, 6], kv_len=None, kv_slot=None, tail=(0, 0)),
    # grouped-query attention: 4 query heads read 2 kv heads
    "gqa": dict(H=4, Hkv=2, hd=8, q_len=[6, 4], q_slot=[8, 4], kv_len=None, kv_slot=None, tail=(0, 0)),
    # cross-attention to short text: kv lengths 1, 3, 7, q lengths 4, 6, 5
    "cross": dict(H=2, Hkv=2, hd=16, q_len=[4, 6, 5], q_slot=[6, 6, 6], kv_len=[1, 3, 7], kv_slot=[2, 4, 8],
                  tail=(0, 2)),
    # sequences longer than the CPU tile (32 rows), GQA, padding
    "long": dict(H=4, Hkv=2, hd=8, q_len=[40, 75], q_slot=[48, 77], kv_len=None, kv_slot=None, tail=(3, 3)),
}


def offsets(lengths):
    cu = [0]
    for n in lengths:
        cu.append(cu[-1] + n)
    return cu


def attention_reference(q, k, v, dout, cu_q, cu_qp, cu_kv, cu_kvp):
    """Per-sample softmax attention in f64; returns o, lse, dq, dk, dv (padding rows 0)."""
    Sq, H, hd = q.shape
    Hkv = k.shape[1]
    q64, k64, v64 = (t.double().requires_grad_() for t in (q, k, v))
    o = torch.zeros(Sq, H, hd, dtype=torch.float64)
    lse = torch.zeros(Sq, H, dtype=torch.float64)
    loss = 0
    for i in range(len(cu_q) - 1):
        nq, nkv = cu_q[i + 1] - cu_q[i], cu_kv[i + 1] - cu_kv[i]
        rq = slice(cu_qp[i], cu_qp[i] + nq)
        rkv = slice(cu_kvp[i], cu_kvp[i] + nkv)
        qs = q64[rq]
        ks = k64[rkv].repeat_interleave(H // Hkv, dim=1)
        vs = v64[rkv].repeat_interleave(H // Hkv, dim=1)
        scores = torch.einsum("qhd,khd->hqk", qs, ks) / hd ** 0.5
        os_ = torch.einsum("hqk,khd->qhd", torch.softmax(scores, dim=-1), vs)
        o[rq] = os_.detach()
        lse[rq] = torch.logsumexp(scores, dim=-1).t().detach()
        loss = loss + (os_ * dout[rq].double()).sum()
    loss.backward()
    return o, lse, q64.grad, k64.grad, v64.grad


def make_case(c):
    q_len, q_slot = c["q_len"], c["q_slot"]
    kv_len = c["kv_len"] if c["kv_len"] is not None else q_len
    kv_slot = c["kv_slot"] if c["kv_slot"] is not None else q_slot
    cu_q, cu_qp = offsets(q_len), offsets(q_slot)
    cu_kv, cu_kvp = offsets(kv_len), offsets(kv_slot)
    Sq, Skv = cu_qp[-1] + c["tail"][0], cu_kvp[-1] + c["tail"][1]
    H, Hkv, hd = c["H"], c["Hkv"], c["hd"]

    def rows_mask(S, cu, cup):
        m = torch.zeros(S, dtype=torch.bool)
        for i in range(len(cu) - 1):
            m[cup[i]:cup[i] + cu[i + 1] - cu[i]] = True
        return m

    mq, mkv = rows_mask(Sq, cu_q, cu_qp), rows_mask(Skv, cu_kv, cu_kvp)
    q = torch.randn(Sq, H, hd) * mq[:, None, None]
    k = torch.randn(Skv, Hkv, hd) * mkv[:, None, None]
    v = torch.randn(Skv, Hkv, hd) * mkv[:, None, None]
    dout = torch.randn(Sq, H, hd) * mq[:, None, None]
    o, lse, dq, dk, dv = attention_reference(q, k, v, dout, cu_q, cu_qp, cu_kv, cu_kvp)
    i32 = lambda a: torch.tensor(a, dtype=torch.int32)
    f32 = lambda t: t.float()
    return {
        "cu_q": i32(cu_q), "cu_q_padded": i32(cu_qp), "cu_kv": i32(cu_kv), "cu_kv_padded": i32(cu_kvp),
        "max_q": i32([max(q_len)]), "max_kv": i32([max(kv_len)]),
        "q": q, "k": k, "v": v, "dout": dout,
        "o": f32(o), "lse": f32(lse), "dq": f32(dq), "dk": f32(dk), "dv": f32(dv),
    }


def write_all(outdir):
    for name, c in CASES.items():
        write_golden(os.path.join(outdir, f"ops_attention_{name}.bin"), make_case(c))
