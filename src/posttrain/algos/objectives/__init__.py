"""The loss functions of the catalogue: policy (clip and importance-weighted), value and entropy
terms, preference losses, distillation divergences and reward-model losses."""
