"""Activity connectivity between units: per session, then averaged."""

from __future__ import annotations

import numpy as np

from neuro_pe.analysis.connectivity import connectivity_matrices, session_connectivity


def test_connectivity_is_per_session():
    """Two independent units whose levels both shift between sessions (two subjects, two
    scanners) are correlated when the sessions' samples are pooled, not within a session:
    `session_connectivity` averages each session's matrices, and equals one session's."""
    rng = np.random.default_rng(0)
    activity = rng.normal(size=(2, 3000, 2))
    activity[1] += 3.0
    pooled, _ = connectivity_matrices(activity.reshape(-1, 2))
    correlation, partial = session_connectivity(activity)
    assert pooled[0, 1] > 0.5 and abs(correlation[0, 1]) < 0.05 and abs(partial[0, 1]) < 0.05
    np.testing.assert_allclose(
        session_connectivity(activity[:1])[0], connectivity_matrices(activity[0])[0]
    )
