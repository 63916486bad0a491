"""The sections of built-in features' established keys (``reward.curio``,
``rl.actor_as_grm``): the config layer validates without torch below everything, so a
feature's keys live here and its behaviour in ``posttrain/features/<name>/``."""
