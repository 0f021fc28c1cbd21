"""cosmos3-robot: the Cosmos 3 world-model design for robotics.

One Mixture-of-Transformers model (a causal Reasoner tower and a flow-matching Generator tower in
every layer) that does forward dynamics, inverse dynamics and policy, on Gymnasium/MuJoCo
simulation and LeRobot datasets.
"""

__version__ = "0.1.0"
