"""The scores a one-run audit reads each canary by: black-box (the model's predictions: loss, margin, reference
rank) and white-box (its parameters and their initial values: gradient alignment, relearning, first-layer
projection, and the one-test scores of the canaries with input coordinates of their own)."""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from inputdp.core import names
from inputdp.core.errors import ConfigError

from ..models import MODELS
from ..models.canary_inputs import CanaryInputs

SCORES = ("loss", "margin", "reference_rank", "gradient_alignment", "relearn", "first_layer_projection",
          "exclusive_weight_change", "canary_input_change")



#: scores whose guesses are fixed before the run (every canary guessed, "in" iff the score is above 0): one test
#: each, whatever m, instead of one per k of the grid; each needs its own canary kind
ONE_TEST = ("exclusive_weight_change", "canary_input_change")



ONE_TEST_KIND = {"exclusive_weight_change": "exclusive_support", "canary_input_change": "canary_inputs"}



#: the scores a plain ``--score all`` means for the canary kinds that have no one-test score
GENERAL_SCORES = tuple(s for s in SCORES if s not in ONE_TEST)



BLACK_BOX = names.BLACK_BOX_SCORES



WHITE_BOX = tuple(s for s in SCORES if s not in BLACK_BOX)



#: the ``relearn`` score: full-batch plain gradient steps on all m canaries (in and out alike) from the trained
#: parameters; a step small enough not to learn the excluded canaries too, within a plateau of equal bounds
#: (reports/mnist-cpu/README.md, "How the audit's constants were fixed")
RELEARN_LR = 0.01



RELEARN_STEPS = 10



def _first_weight(model: nn.Module) -> tuple[str, nn.Module]:
    for name, module in model.named_modules():
        if isinstance(module, (nn.Conv2d, nn.Linear)):
            return name, module
    raise ValueError("the model has no conv or linear layer")



@torch.no_grad()
def _logits(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    model.eval()
    return torch.cat([model(x[i: i + 500]) for i in range(0, x.shape[0], 500)])



def _margin(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    true = logits.gather(1, y.view(-1, 1)).squeeze(1)
    return true - logits.scatter(1, y.view(-1, 1), float("-inf")).max(1).values



@torch.no_grad()
def black_box_scores(model: nn.Module, x: torch.Tensor, y: torch.Tensor, x_ref: torch.Tensor | None = None,
                     y_ref: torch.Tensor | None = None) -> dict[str, np.ndarray]:
    """Scores from the model's outputs alone.

    - ``loss``: minus the cross-entropy of the canary's label;
    - ``margin``: the label's logit minus the largest other logit;
    - ``reference_rank`` (with a reference set): the canary's probability of its label, ranked among the same
      probability for the fresh reference canaries that carry the same label (never trained on, so they show
      what the model answers for an unseen canary of that label); ties beyond the reference broken by margin.
      It discounts the canaries an unseen input of their kind would already be given (a model that sends most
      noise images to one class), which raw loss counts as memorised.
    """
    logits = _logits(model, x)
    loss = F.cross_entropy(logits, y, reduction="none")
    margin = _margin(logits, y)
    out = {"loss": (-loss).cpu().numpy(), "margin": margin.cpu().numpy()}
    if x_ref is not None and y_ref is not None:
        p_y = F.softmax(logits.double(), 1).gather(1, y.view(-1, 1)).squeeze(1).cpu().numpy()
        p_ref = F.softmax(_logits(model, x_ref).double(), 1).cpu().numpy()
        y_np, y_ref_np = y.cpu().numpy(), y_ref.cpu().numpy()
        tiebreak = (np.argsort(np.argsort(margin.cpu().numpy(), kind="stable"), kind="stable") + 1) / (len(y_np) + 1)
        rank = np.empty(len(y_np))
        for c in np.unique(y_np):
            null = np.sort(p_ref[y_ref_np == c, c])
            sel = y_np == c
            rank[sel] = (np.searchsorted(null, p_y[sel], side="left") + tiebreak[sel]) / (len(null) + 1)
        out["reference_rank"] = rank
    return out



def white_box_scores(final: nn.Module, initial_state: dict[str, torch.Tensor], x: torch.Tensor,
                     y: torch.Tensor, wanted: Sequence[str] | None = None,
                     support: Sequence[torch.Tensor] | None = None) -> dict[str, np.ndarray]:
    """Scores for an adversary who holds the initial and the trained parameters (those in ``wanted`` only).

    - ``gradient_alignment``: <-grad L(canary; theta_T), theta_T - theta_0> / ||grad L(canary; theta_T)||:
      gradient descent moves the parameters against the gradients of the examples it trains on (the gradient
      at the trained parameters separated in- from out-canaries better than at theta_0 in our trials);
    - ``relearn``: minus the canary's loss after ``RELEARN_STEPS`` plain full-batch gradient steps on all m
      canaries from the trained parameters. An example the model was trained on and then forgot leaves traces
      that make it quicker to relearn than one it never saw; every canary gets the same steps, so the score is
      a function of the released parameters and the public canaries alone;
    - ``first_layer_projection``: ||first_layer_change(u_c)||^2 / ||u_c||^2, u_c what the first weight layer
      receives for the canary (its pixels, or a scatter model's fixed features of them): how strongly the change
      of the first layer responds to the canary's input (independent of its label);
    - ``exclusive_weight_change`` (exclusive-support canaries, a dense first layer): the norm of the first
      layer's change theta_T - theta_0 on the canary's own input coordinates. Without the canary and without
      noise on the parameters it is exactly 0;
    - ``canary_input_change`` (``canary_inputs`` canaries, any model): the same for the widened model's map of
      the canary's own appended coordinate.
    """
    wanted = tuple(s for s in WHITE_BOX if s not in ONE_TEST) if wanted is None else wanted
    initial = copy.deepcopy(final)
    initial.load_state_dict(initial_state)
    initial.eval()
    final.eval()
    out: dict[str, np.ndarray] = {}
    if "gradient_alignment" in wanted:
        out["gradient_alignment"] = _gradient_alignment(final, initial, x, y)
    if "relearn" in wanted:
        out["relearn"] = relearn_scores(final, x, y)
    if "first_layer_projection" in wanted:
        out["first_layer_projection"] = _first_layer_projection(final, initial, x)
    if "exclusive_weight_change" in wanted:
        if support is None:
            raise ConfigError("score 'exclusive_weight_change' needs exclusive_support canaries")
        out["exclusive_weight_change"] = exclusive_weight_change(final, initial, support)
    if "canary_input_change" in wanted:
        out["canary_input_change"] = canary_input_change(final, initial)
    return out



def canary_input_change(final: nn.Module, initial: nn.Module) -> np.ndarray:
    """||A_T[:, j] - A_0[:, j]|| for each canary j, A the widened model's map of the canaries' own coordinates.
    Without canary j and without noise on the parameters it is exactly 0."""
    if not isinstance(final, CanaryInputs) or not isinstance(initial, CanaryInputs):
        raise ConfigError("score 'canary_input_change' needs a model widened for canary_inputs canaries")
    change = (final.canary_weight.detach() - initial.canary_weight.detach()).double()
    return change.norm(dim=0).cpu().numpy()



def exclusive_weight_change(final: nn.Module, initial: nn.Module, support: Sequence[torch.Tensor]) -> np.ndarray:
    """||(W_T - W_0)[:, S_c]|| for each canary c with coordinates S_c, W the first (dense) layer's weight."""
    name, layer0 = _first_weight(initial)
    if not isinstance(layer0, nn.Linear):
        raise ConfigError(f"score 'exclusive_weight_change' is not allowed for this model: its first layer "
                          f"({name}) is a {type(layer0).__name__}, not dense on the input")
    layer_t = dict(final.named_modules())[name]
    dw = (layer_t.weight.detach() - layer0.weight.detach()).double()
    return np.array([float(dw[:, cols.to(dw.device)].norm()) for cols in support])



def _gradient_alignment(final: nn.Module, initial: nn.Module, x: torch.Tensor, y: torch.Tensor) -> np.ndarray:
    params0 = [p for p in initial.parameters() if p.requires_grad]
    params_t = [p for p in final.parameters() if p.requires_grad]
    delta = [pt.detach() - p0.detach() for pt, p0 in zip(params_t, params0)]
    align = np.empty(x.shape[0])
    for i in range(x.shape[0]):
        loss = F.cross_entropy(final(x[i: i + 1]), y[i: i + 1])
        grads = torch.autograd.grad(loss, params_t)
        dot = sum(float((g * d).sum()) for g, d in zip(grads, delta))
        norm = math.sqrt(sum(float(g.pow(2).sum()) for g in grads)) + 1e-12
        align[i] = -dot / norm
    return align



def _first_layer_projection(final: nn.Module, initial: nn.Module, x: torch.Tensor) -> np.ndarray:
    name, layer0 = _first_weight(initial)
    layer_t = dict(final.named_modules())[name]
    dw = layer_t.weight.detach() - layer0.weight.detach()
    inputs = _layer_inputs(final, layer_t, x)
    with torch.no_grad():
        if isinstance(layer0, nn.Conv2d):
            resp = F.conv2d(inputs, dw, None, layer0.stride, layer0.padding, layer0.dilation, layer0.groups)
        else:
            resp = F.linear(inputs.flatten(1), dw)
        return (resp.flatten(1).pow(2).sum(1) / inputs.flatten(1).pow(2).sum(1).clamp_min(1e-12)).cpu().numpy()



@torch.no_grad()
def _layer_inputs(model: nn.Module, layer: nn.Module, x: torch.Tensor, chunk: int = 500) -> torch.Tensor:
    """What ``layer`` receives when ``model`` (in eval mode) is given each of ``x``: the images themselves for a
    model whose first weight layer reads them, the fixed frontend's normalised output for a scatter model."""
    got: list[torch.Tensor] = []
    hook = layer.register_forward_pre_hook(lambda _module, args: got.append(args[0].detach()))
    try:
        model.eval()
        for i in range(0, x.shape[0], chunk):
            model(x[i: i + chunk])
    finally:
        hook.remove()
    return torch.cat(got)



def relearn_scores(model: nn.Module, x: torch.Tensor, y: torch.Tensor, *, lr: float = RELEARN_LR,
                   steps: int = RELEARN_STEPS, chunk: int = 500) -> np.ndarray:
    """Minus each canary's loss after ``steps`` full-batch gradient steps on the mean loss of all canaries.

    Works on a copy in eval mode (batch norm uses its running statistics, so a canary's output does not depend
    on the others in its chunk); the gradient is accumulated over chunks, so it equals the full-batch one.
    """
    tuned = copy.deepcopy(model).eval()
    params = [p for p in tuned.parameters() if p.requires_grad]
    opt = torch.optim.SGD(params, lr=lr)
    n = x.shape[0]
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        for i in range(0, n, chunk):
            loss = F.cross_entropy(tuned(x[i: i + chunk]), y[i: i + chunk], reduction="sum") / n
            loss.backward()
        opt.step()
    logits = _logits(tuned, x)
    return (-F.cross_entropy(logits, y, reduction="none")).cpu().numpy()



def resolve_scores(text: str, canary_kind: str, model: str) -> tuple[str, ...]:
    """``auto``: for exclusive-support canaries on a dense-input model the one decisive test
    (``exclusive_weight_change``), else every general score; ``all``: every score the kind and model allow;
    otherwise a comma-separated list, taken as given (``check_arguments`` refuses what does not fit)."""

    if text not in ("auto", "all"):
        return tuple(t.strip() for t in text.split(",") if t.strip())
    if canary_kind == "canary_inputs":  # any model: the coordinates are read by a map of their own
        decisive = ("canary_input_change",)
        return decisive if text == "auto" else tuple(s for s in GENERAL_SCORES if s != "reference_rank") + decisive
    if canary_kind != "exclusive_support":
        return GENERAL_SCORES
    dense = MODELS.get(model).dense_input
    if text == "auto" and dense:
        return ("exclusive_weight_change",)
    general = tuple(s for s in GENERAL_SCORES if s != "reference_rank")  # no fresh canaries to rank against
    return general + (("exclusive_weight_change",) if dense else ())
