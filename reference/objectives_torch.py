"""PyTorch twin of vfm's flow-matching and DDPM objectives (src/diffusion/flow.c, ddpm.c;
docs/diffusion.md), on the model of model_torch.py. Written from the formulas, sample by sample.

flow: x_s = (1-s)*x0 + s*eps, network time input 1000*s, target eps - x0, loss = mean over the
      pack's real tokens of the channel-mean squared error (s = sigma, 1 = noise).
ddpm: the DiT paper's diffusion (improved DDPM): beta linear 1e-4..0.02 over T = 1000 (float64
      numpy), re-derived through the respacing rule with every step kept, x_t = sqrt(ab)*x0 +
      sqrt(1-ab)*eps, network time input t, epsilon MSE; with 2C output channels (C fastest in a
      token, the second C are v) the learned-range variance and the VB term in bits (KL, or the
      discretised-Gaussian decoder NLL at t = 0), whose model mean uses the detached epsilon.
"""
import math

import numpy as np
import torch

T_STEPS = 1000


def ddpm_chain(steps=T_STEPS):
    """(timesteps, betas, alphas_cumprod) of the chain respaced to `steps` (float64)."""
    base_betas = np.linspace(1e-4, 0.02, T_STEPS, dtype=np.float64)
    base_ac = np.cumprod(1.0 - base_betas)
    stride = (T_STEPS - 1) / (steps - 1) if steps > 1 else 1
    use, cur = set(), 0.0
    for _ in range(steps):
        use.add(round(cur))
        cur += stride
    timesteps, betas, last = [], [], 1.0
    for i, ab in enumerate(base_ac):
        if i in use:
            timesteps.append(i)
            betas.append(1.0 - ab / last)
            last = ab
    betas = np.array(betas, dtype=np.float64)
    return np.array(timesteps), betas, np.cumprod(1.0 - betas)


def ddpm_coefficients(t, chain=None):
    """float32 scalars at step t: sqrt(ab), sqrt(1-ab), 1/sqrt(ab), sqrt(1/ab-1), posterior mean
    coefficients, clipped posterior log variance, log beta."""
    _, betas, ac = chain if chain is not None else ddpm_chain()
    ac_prev = np.append(1.0, ac[:-1])
    post_var = betas * (1.0 - ac_prev) / (1.0 - ac)
    post_logvar = np.log(np.append(post_var[1], post_var[1:]))
    f32 = lambda a: torch.tensor(float(a[t]), dtype=torch.float32)  # noqa: E731
    return dict(sqrt_ab=f32(np.sqrt(ac)), sqrt_1m_ab=f32(np.sqrt(1.0 - ac)), recip=f32(np.sqrt(1.0 / ac)),
                recipm1=f32(np.sqrt(1.0 / ac - 1.0)), c1=f32(betas * np.sqrt(ac_prev) / (1.0 - ac)),
                c2=f32((1.0 - ac_prev) * np.sqrt(1.0 - betas) / (1.0 - ac)), post_logvar=f32(post_logvar),
                log_beta=f32(np.log(betas)))


def _cdf(x):
    return 0.5 * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def _decoder_log_prob(x0, mean, log_scale):
    """log P(x0's bin of width 2/255) under N(mean, exp(log_scale)^2); edge bins open."""
    inv = torch.exp(-log_scale)
    c = x0 - mean
    cdf_plus, cdf_min = _cdf(inv * (c + 1.0 / 255)), _cdf(inv * (c - 1.0 / 255))
    log_plus = torch.log(cdf_plus.clamp(min=1e-12))
    log_one_minus_min = torch.log((1.0 - cdf_min).clamp(min=1e-12))
    log_delta = torch.log((cdf_plus - cdf_min).clamp(min=1e-12))
    return torch.where(x0 < -0.999, log_plus, torch.where(x0 > 0.999, log_one_minus_min, log_delta))


def ddpm_vb(eps, v, x_t, x0, t, k):
    """Per-element VB term in bits; eps enters detached. Evaluated in float64 (as vfm does): in
    float32 the decoder NLL's difference of two CDF values near 0 or 1 cancels to a few ulps."""
    eps, v, x_t, x0 = eps.double(), v.double(), x_t.double(), x0.double()
    k = {name: val.double() for name, val in k.items()}
    return _vb64(eps, v, x_t, x0, t, k).float()


def _vb64(eps, v, x_t, x0, t, k):
    pred_x0 = k["recip"] * x_t - k["recipm1"] * eps.detach()
    model_mean = k["c1"] * pred_x0 + k["c2"] * x_t
    frac = (v + 1) / 2
    logvar = frac * k["log_beta"] + (1 - frac) * k["post_logvar"]
    if t == 0:
        return -_decoder_log_prob(x0, model_mean, 0.5 * logvar) / math.log(2.0)
    true_mean = k["c1"] * x0 + k["c2"] * x_t
    lv1 = k["post_logvar"]
    kl = 0.5 * (-1.0 + logvar - lv1 + torch.exp(lv1 - logvar) + (true_mean - model_mean) ** 2 * torch.exp(-logvar))
    return kl / math.log(2.0)


def split_halves(out, C):
    """[n, P*2C] (C fastest, first C = eps, next C = v) -> ([n, P*C], [n, P*C])."""
    n = out.shape[0]
    o = out.reshape(n, -1, 2 * C)
    return o[..., :C].reshape(n, -1), o[..., C:].reshape(n, -1)


def _text(s):
    return torch.zeros(1, s["text"].shape[1]) if s["dropped"] else s["text"]


def flow_pack_loss(model, samples):
    """samples: dicts with latent_tokens, noise, t (sigma), fps, text, dropped, grid, class_row (None
    without classes)."""
    total, count, outs, per = 0.0, 0, [], []
    for s in samples:
        x0, e, sig = s["latent_tokens"], s["noise"], torch.tensor(s["t"], dtype=torch.float32)
        x_t = (1 - sig) * x0 + sig * e
        out = model.forward_sample(x_t, 1000 * sig, torch.as_tensor(s["fps"], dtype=torch.float32), _text(s), s["grid"],
                                   s.get("class_row"))
        err = ((out - (e - x0)) ** 2).mean(dim=-1)
        total, count = total + err.sum(), count + err.shape[0]
        outs.append(out)
        per.append(err.mean())
    return total / count, outs, per


def ddpm_pack_loss(model, samples, C):
    """samples as flow_pack_loss with t an integer timestep; C = latent channels (learned sigma
    when the model gives 2C values per position: model.learn_sigma)."""
    total, count, outs, per = 0.0, 0, [], []
    for s in samples:
        t = int(s["t"])
        k = ddpm_coefficients(t)
        x0, e = s["latent_tokens"], s["noise"]
        x_t = k["sqrt_ab"] * x0 + k["sqrt_1m_ab"] * e
        out = model.forward_sample(x_t, torch.tensor(float(t)), torch.as_tensor(s["fps"], dtype=torch.float32), _text(s),
                                   s["grid"], s.get("class_row"))
        learned = out.shape[-1] == 2 * x0.shape[-1]
        eps, v = split_halves(out, C) if learned else (out, None)
        err = ((eps - e) ** 2).mean(dim=-1)
        if learned:
            err = err + ddpm_vb(eps, v, x_t, x0, t, k).mean(dim=-1)
        total, count = total + err.sum(), count + err.shape[0]
        outs.append(out)
        per.append(err.mean())
    return total / count, outs, per
