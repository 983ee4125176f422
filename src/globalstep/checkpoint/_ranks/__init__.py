"""The ranks: checkpoints of several processes (one commit, all or nothing), sharded
arrays, per-rank leaves, the save round."""
