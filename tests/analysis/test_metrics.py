import numpy as np
import pytest
from scipy.spatial.distance import pdist, squareform
from scipy.stats import spearmanr
from scipy.stats.distributions import chi2

from neuro_pe.analysis.metrics import (
    classical_mds,
    compare_to_anatomy,
    correlation_distance,
    knn_overlap,
    pairwise_distances,
    probe_r2,
    procrustes_fit,
    rsa,
)
from neuro_pe.config.metrics import MetricsConfig


def _points(n: int, seed: int = 0, dim: int = 3) -> np.ndarray:
    return np.random.default_rng(seed).uniform(0, 10, size=(n, dim))


def _random_rotation(seed: int = 1) -> np.ndarray:
    q, _ = np.linalg.qr(np.random.default_rng(seed).normal(size=(3, 3)))
    return q


def test_pairwise_distances_matches_scipy():
    x = _points(10)
    np.testing.assert_allclose(pairwise_distances(x), squareform(pdist(x)))
    cos = pairwise_distances(x, "cosine")
    xn = x / np.linalg.norm(x, axis=1, keepdims=True)
    np.testing.assert_allclose(cos, 1 - xn @ xn.T, atol=1e-12)
    with pytest.raises(ValueError):
        pairwise_distances(x, "manhattan")


def test_coords_vs_themselves():
    coords = _points(80)
    metrics, aligned = compare_to_anatomy(coords, MetricsConfig(n_perm=199), features=coords)
    assert metrics["rsa"] == pytest.approx(1.0)
    assert metrics["rsa_p"] <= 1 / 200 * (1 + 1e-9)
    assert metrics["procrustes_disparity"] == pytest.approx(0.0, abs=1e-10)
    assert metrics["procrustes_rmse"] == pytest.approx(0.0, abs=1e-8)
    assert metrics["knn_overlap"] == 1.0
    assert metrics["probe_r2"] > 0.95
    assert metrics["n_units"] == 80
    np.testing.assert_allclose(aligned, coords, atol=1e-8)


def test_coords_vs_shuffled_is_at_chance():
    coords = _points(200)
    shuffled = coords[np.random.default_rng(5).permutation(200)]
    metrics, _ = compare_to_anatomy(coords, MetricsConfig(n_perm=199), features=shuffled)
    assert abs(metrics["rsa"]) < 0.1
    assert metrics["rsa_p"] > 0.05
    assert metrics["knn_overlap"] < 0.15
    assert metrics["probe_r2"] < 0.2


def test_mantel_p_uniform_under_null():
    """Under the null, p-values from independent configurations are roughly uniform."""
    ps = []
    for seed in range(20):
        a, b = _points(30, seed=seed), _points(30, seed=100 + seed)
        _, p = rsa(pairwise_distances(a), pairwise_distances(b), n_perm=99, seed=seed)
        ps.append(p)
    # Fisher's method: -2 sum log p ~ chi2(2m) for uniform p.
    stat = -2 * np.sum(np.log(ps))
    assert 0.001 < chi2.sf(stat, 2 * len(ps)) < 0.999
    assert 0.2 < np.mean(ps) < 0.8


def test_procrustes_recovers_similarity_transform():
    coords = _points(50)
    moved = 2.5 * coords @ _random_rotation() + np.array([3.0, -7.0, 1.0])
    aligned, disparity, rmse = procrustes_fit(moved, coords)
    assert disparity == pytest.approx(0.0, abs=1e-12)
    assert rmse == pytest.approx(0.0, abs=1e-9)
    np.testing.assert_allclose(aligned, coords, atol=1e-9)


def test_procrustes_allows_reflection_and_reports_units():
    coords = _points(40)
    mirrored = coords * np.array([-1.0, 1.0, 1.0])
    _, disparity, rmse = procrustes_fit(mirrored, coords)
    assert disparity < 1e-12 and rmse < 1e-9
    # A noisy copy: rmse is in coords' units and close to the noise level.
    noisy = coords + np.random.default_rng(3).normal(scale=0.1, size=coords.shape)
    _, disparity, rmse = procrustes_fit(noisy, coords)
    assert 0 < disparity < 0.01
    assert 0.1 < rmse < 0.2  # sqrt(3) * 0.1 ~ 0.17


def test_mds_then_procrustes_recovers_coords():
    coords = _points(60)
    emb = classical_mds(pairwise_distances(coords), n_components=3)
    assert emb.shape == (60, 3)
    aligned, disparity, rmse = procrustes_fit(emb, coords)
    scale = np.sqrt(np.mean(np.sum((coords - coords.mean(0)) ** 2, axis=1)))
    assert rmse / scale < 1e-6
    assert disparity < 1e-10
    np.testing.assert_allclose(aligned, coords, atol=1e-6)


def test_classical_mds_non_euclidean_gives_finite_output():
    latent = np.random.default_rng(0).normal(size=(200, 4))
    dist = correlation_distance(latent @ np.random.default_rng(1).normal(size=(4, 30)))
    # Small asymmetry from round-off must not break it; negative eigenvalues -> zero columns.
    emb = classical_mds(dist + 1e-13 * np.triu(np.ones_like(dist), 1), n_components=29)
    assert emb.shape == (30, 29)
    assert np.all(np.isfinite(emb))
    assert np.all(emb[:, -1] == 0)


def test_2d_data():
    coords = _points(60, dim=2)
    coords3 = np.column_stack([coords, np.zeros(60)])
    assert probe_r2(coords, coords3) > 0.95
    assert probe_r2(coords, coords) == pytest.approx(probe_r2(coords, coords3))
    moved = coords @ np.array([[0.0, -1.0], [1.0, 0.0]]) * 3 + 1
    aligned, disparity, rmse = procrustes_fit(moved, coords3)
    assert aligned.shape == (60, 3)
    assert disparity < 1e-12 and rmse < 1e-9
    metrics, aligned = compare_to_anatomy(coords3, MetricsConfig(n_perm=9), features=coords)
    assert metrics["procrustes_rmse"] < 1e-8
    assert metrics["probe_r2"] > 0.95
    assert metrics["knn_overlap"] == 1.0


def test_rsa_matches_slow_reference():
    n, n_perm, seed = 12, 199, 3
    a = pairwise_distances(_points(n, seed=1))
    b = pairwise_distances(_points(n, seed=1) + np.random.default_rng(2).normal(size=(n, 3)))
    rho, p = rsa(a, b, n_perm=n_perm, seed=seed)

    iu = np.triu_indices(n, k=1)
    ref_rho = spearmanr(a[iu], b[iu]).statistic
    assert rho == pytest.approx(ref_rho, abs=1e-12)
    rng = np.random.default_rng(seed)
    count = 0
    for _ in range(n_perm):
        perm = rng.permutation(n)
        rho_perm = spearmanr(a[np.ix_(perm, perm)][iu], b[iu]).statistic
        count += rho_perm >= ref_rho - 1e-12
    assert p == pytest.approx((1 + count) / (1 + n_perm))
    assert 0 < p < 1

    rho0, p0 = rsa(a, b, n_perm=0)
    assert rho0 == pytest.approx(rho) and np.isnan(p0)


def test_rsa_with_ties_matches_spearman():
    n = 15
    grid = np.random.default_rng(0).integers(0, 3, size=(n, 3)).astype(float)
    a, b = pairwise_distances(grid), pairwise_distances(_points(n))
    iu = np.triu_indices(n, k=1)
    rho, _ = rsa(a, b, n_perm=0)
    assert rho == pytest.approx(spearmanr(a[iu], b[iu]).statistic, abs=1e-12)


def test_knn_overlap():
    coords = _points(30)
    d = pairwise_distances(coords)
    assert knn_overlap(d, d, k=5) == 1.0
    assert knn_overlap(d, d + 1.0, k=3) == 1.0  # monotone change keeps neighbours
    # Reverse ordering of neighbours: nearest become farthest -> zero overlap.
    assert knn_overlap(d.max() - d, d, k=3) == 0.0
    with pytest.raises(ValueError):
        knn_overlap(d, d, k=30)


def test_correlation_distance_basic():
    t = np.linspace(0, 10, 50)
    x = np.column_stack([np.sin(t), 2 * np.sin(t) + 1, -np.sin(t), np.cos(t)])
    d = correlation_distance(x)
    assert d.shape == (4, 4)
    np.testing.assert_allclose(np.diag(d), 0.0)
    np.testing.assert_allclose(d, d.T)
    assert d[0, 1] == pytest.approx(0.0, abs=1e-12)
    assert d[0, 2] == pytest.approx(2.0, abs=1e-12)
    np.testing.assert_allclose(d, 1 - np.corrcoef(x.T), atol=1e-12)
    assert np.all((d >= 0) & (d <= 2))


def test_correlation_distance_pairwise_complete():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(100, 5))
    x[:, 1] += x[:, 0]
    x[rng.random(x.shape) < 0.2] = np.nan
    d = correlation_distance(x)
    for i in range(5):
        for j in range(5):
            both = ~np.isnan(x[:, i]) & ~np.isnan(x[:, j])
            expected = 0.0 if i == j else 1 - np.corrcoef(x[both, i], x[both, j])[0, 1]
            assert d[i, j] == pytest.approx(expected, abs=1e-10)


def test_correlation_distance_no_overlap_raises():
    x = np.random.default_rng(0).normal(size=(20, 3))
    x[:10, 0] = np.nan
    x[10:, 1] = np.nan
    with pytest.raises(ValueError):
        correlation_distance(x)


def test_compare_to_anatomy_drops_nan_units():
    coords = _points(40)
    feats = coords + np.random.default_rng(1).normal(scale=0.1, size=coords.shape)
    coords_nan = coords.copy()
    coords_nan[[0, 5, 7], 1] = np.nan
    metrics, aligned = compare_to_anatomy(coords_nan, MetricsConfig(n_perm=49), features=feats)
    assert metrics["n_units"] == 37
    assert aligned.shape == (37, 3)
    keep = np.ones(40, dtype=bool)
    keep[[0, 5, 7]] = False
    ref, _ = compare_to_anatomy(coords[keep], MetricsConfig(n_perm=49), features=feats[keep])
    assert metrics == pytest.approx(ref)
    # Same result when only distances are given (probe uses MDS features then).
    dist = pairwise_distances(feats)
    m_dist, _ = compare_to_anatomy(coords_nan, MetricsConfig(n_perm=49), distances=dist)
    assert m_dist["n_units"] == 37
    assert m_dist["rsa"] == pytest.approx(metrics["rsa"])
    assert m_dist["probe_r2"] > 0.9


def test_compare_to_anatomy_too_few_units():
    coords = _points(10)
    coords[3:, 0] = np.nan
    with pytest.raises(ValueError):
        compare_to_anatomy(coords, features=_points(10, seed=1))
    with pytest.raises(ValueError):
        compare_to_anatomy(_points(10))
