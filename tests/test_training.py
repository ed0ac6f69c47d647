import numpy as np

from agent.evaluate.compare import check_goals, evaluate, summarize
from agent.learn.model_io import load_model
from agent.scoring import ModelScorer
from agent.learn.dqn import TrainConfig, save_trained, train


def test_short_training_learns_to_pack_three_nodes(tmp_path):
    cfg = TrainConfig(policy="EE", total_timesteps=3000, learning_starts=300, exploration_fraction=0.3,
                      min_nodes=3, max_nodes=3, scenarios=("test2",), churn=False, log_dir="",
                      progress=False, out=str(tmp_path), seed=3)
    network, record = train(cfg)
    path = save_trained(cfg, network, record)
    model = load_model(path, expected_policy="EE")
    assert model.metadata["training"]["steps"] == 3000

    results, _ = evaluate("EE", ModelScorer(model), ("test2",), (3,), seeds=2, decisions=150,
                          progress=False)
    rows = {r["scorer"]: r for r in summarize(results)}
    learned = rows["rl-ee"]["mean_active_nodes"]
    # packs as tightly as MostAllocated, and far tighter than spreading or chance
    assert learned <= 1.05 * rows["most-allocated"]["mean_active_nodes"]
    assert learned < 0.8 * rows["random"]["mean_active_nodes"]
    assert all(c.ok for c in check_goals("EE", summarize(results)))
    assert np.isfinite(model.q_values(*_probe())).all()


def _probe():
    from agent.sim.simulator import Simulation
    sim = Simulation("poisson", 7, seed=0)
    sim.next_decision()
    return sim.candidate_state()
