"""``algo.behaviour_reg``: agent episodes' malformed tool calls lose positive credit (its
token rule) and, optionally, long successes of easy groups lose reward (its reward rule,
``long_success_penalty``)."""

from posttrain.hooks import Feature

FEATURE = Feature("behaviour_reg", order=30, package=__name__,
                  rewards=".rules:long_success_rewards", advantages=".rules:error_advantages")
