"""The config sections by what each describes: the trainer and its RL, distillation and
fixed-data stages, the cluster, data columns and files, the task and engine families' bases,
agent episodes, the reward and skills."""
