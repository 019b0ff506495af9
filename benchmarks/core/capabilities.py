"""What the harness must know of a method besides its mechanism (``Capabilities``): a plain record, in the bottom
layer, so that a method's registry entry (``inputdp.methods.MethodInfo``) can carry it beside its lazy target and
listing or filtering methods imports none of them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, kw_only=True)
class Capabilities:
    """What the harness must know of a method besides its mechanism: a record the method declares once."""

    #: False for a reference that spends no budget: a sweep runs it once per seed, at epsilon = inf
    private: bool = True
    #: True for a method whose shape is not one step per Poisson batch (PATE): it implements ``fit``
    own_loop: bool = False
    #: the normalisation the method's models use unless the run says otherwise
    default_norm: str = "group"
    #: option sets a speed check times separately (DP-SGD: each per-example-gradient mode); one empty set by default
    speed_variants: tuple[Mapping[str, Any], ...] = ({},)
    #: why the step cannot run under ``torch.compile``, in one line ("" where it can)
    compile_refusal: str = ""
    #: options that make a different recipe of the same method: a run whose value differs from the default is its
    #: own leaderboard row ("method [option=value]"), not a seed of the default's
    variant_options: tuple[str, ...] = ()
    #: True for a method that releases one noisy vector per sampled example (its claim is about those vectors);
    #: it hands each step's released vectors (detached, one row per example, in the batch's order) to the run's
    #: ``TrainingSetup.release_observer`` when one is set (the hidden-state audit reads them)
    releases_vectors: bool = False
    #: True when the method takes public inputs from the test split (PATE's student): a run that evaluates on
    #: held-out training examples instead (``RunConfig.holdout``) would hand it private ones, so it is refused
    public_inputs_from_test: bool = False
    #: True when the released model reads the data through the model's ``features`` at initialisation, never
    #: trained (the sound input-private methods): coordinates an audit appends for its canaries would enter through
    #: a map that is zero at initialisation and stays so, so that audit is refused for it (its release is audited at
    #: the mechanism, ``release_trials``)
    fixed_features: bool = False

    @property
    def compilable(self) -> bool:
        return not self.compile_refusal
