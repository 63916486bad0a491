"""MTP heads and speculative decoding (``trainer.mtp``, ``engine.draft_tokens``;
docs/engines.md): a multi-token-prediction head (``models.mtp``) learns beside the policy
after every optimiser step, is saved beside each model and resumed with the checkpoint, and
the run's torch engine drafts with the starting model's head; every evaluation reports the
acceptance of the drafts (``spec/...``). The drafting decoder itself is the torch engine's
(``engines.speculative``)."""

from posttrain.hooks import Feature

FEATURE = Feature("mtp", order=90, package=__name__, trainer_addon=".training:head_training",
                  engine_options=".drafting:starting_head",
                  engine_metrics=".drafting:acceptance")
