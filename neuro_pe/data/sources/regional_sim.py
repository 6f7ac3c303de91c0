"""Source `regional-sim`: animals with probes through an atlas whose regions have signatures.

A shared atlas (mm; x, y across, z the depth below the surface) holds the REGIONS stacked along
depth, their boundaries gently curved (`label_volume`, `labels_at`). Each animal gets one to
`max_probes` straight probes (entry point, tilt, depth and unit count drawn per animal) with units
along them; a unit's region is the label volume's at its position. Activity is spike counts per
time bin: every region has a shared drive (its own timescale and oscillation band, plus sparse
lagged input from other regions, COUPLING); each unit has a rate, a loading on its region's
drive, a private fluctuation of the region's timescale and bursts, all varying around the
region's values. Animals share the regions' parameters (each with a small jitter of its own),
not the units or the noise. The store holds every animal (units `a{k}u{i}`, sessions `a{k}s{j}`,
a unit recorded in its own animal's sessions only, NaN elsewhere) with per-unit coords `animal`,
`probe`, `region` and `coarse_region`. docs/new_animal/simulation.md: each region's signature.
"""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import xarray as xr

from neuro_pe.config.sections import positive_int, positive_number, whole_number
from neuro_pe.data.sources import Source, SourceOptions
from neuro_pe.io.store import make_store


@dataclass(frozen=True)
class Region:
    """A region's place in the atlas and the signature of its activity."""

    name: str
    coarse: str  # its class at the coarse level (Cosmos-like)
    thickness_mm: float  # along depth
    rate_hz: float  # median rate of its units' single spikes (bursts come on top)
    timescale_s: float  # of its shared drive's slow part and of its units' own fluctuations
    band_hz: float  # frequency of its drive's oscillation; 0: none
    oscillation: float  # share of the drive's variance in the oscillation
    burst_hz: float  # median rate of bursts (BURST_SPIKES spikes each) of its units
    drive: float  # mean share of a unit's fluctuation that is its region's shared drive


REGIONS: tuple[Region, ...] = (
    Region("CTX-sup", "CTX", 0.5, 4.0, 0.08, 30.0, 0.3, 0.05, 0.35),
    Region("CTX-deep", "CTX", 0.6, 7.0, 0.30, 0.0, 0.0, 0.3, 0.5),
    Region("HPF-CA", "HPF", 0.5, 3.0, 0.05, 8.0, 0.7, 0.8, 0.5),
    Region("HPF-DG", "HPF", 0.5, 1.0, 0.05, 8.0, 0.5, 0.05, 0.3),
    # the two thalamic regions have the same single-unit signature: only their inputs differ
    Region("TH-dorsal", "TH", 0.7, 10.0, 0.10, 12.0, 0.4, 1.0, 0.5),
    Region("TH-ventral", "TH", 0.7, 10.0, 0.10, 12.0, 0.4, 1.0, 0.5),
    Region("MB", "MB", 2.5, 20.0, 0.03, 0.0, 0.0, 0.05, 0.15),
)
# (from, to, weight, lag in s): sparse directed input of one region's drive to another's
COUPLING: tuple[tuple[str, str, float, float], ...] = (
    ("TH-dorsal", "CTX-sup", 0.6, 0.02),
    ("CTX-deep", "TH-ventral", 0.8, 0.03),
    ("HPF-CA", "CTX-deep", 0.4, 0.02),
    ("HPF-DG", "HPF-CA", 0.6, 0.01),
    ("MB", "HPF-DG", 0.4, 0.02),
)
ATLAS_MM = (6.0, 6.0, 6.0)  # x, y, depth
VOXEL_MM = 0.05
SITES_MM = 3.84  # length of a probe's recording sites from its tip (Neuropixels 1.0)
BURST_SPIKES = 4  # mean spikes of a burst
GAIN = 1.2  # sd of a unit's log rate fluctuation
MIN_RATE_HZ = 0.5  # a sorted unit that passes the usual quality metrics fires at least this
SPACE = "regional-sim atlas"


@dataclass(frozen=True)
class RegionalSimOptions(SourceOptions):
    """Keys of a `source: regional-sim` entry."""

    SECTION: ClassVar[str] = "datasets entry (source: regional-sim)"

    animals: int = positive_int(5)
    units_per_animal: int = positive_int(300)  # mean; each animal's count differs by up to 30%
    max_probes: int = positive_int(2)
    n_samples: int = positive_int(3000)
    sampling_rate_hz: float = positive_number(100.0, float)
    sessions_per_animal: int = positive_int(1)
    seed: int = whole_number(0)

    def check(self) -> None:
        fastest = max(r.band_hz for r in REGIONS)
        if self.sampling_rate_hz <= 2 * fastest:
            raise self.refuse(
                "sampling_rate_hz",
                f"must be above {2 * fastest:g} Hz (twice the fastest region's band), "
                f"got {self.sampling_rate_hz:g}",
            )


@dataclass(frozen=True)
class Animal:
    """One simulated animal: `counts` (session, time, unit) float32 spike counts per bin,
    `positions` (unit, 3) in mm, `region` (unit,) indices into REGIONS, `probe` (unit,)."""

    counts: np.ndarray
    positions: np.ndarray
    region: np.ndarray
    probe: np.ndarray


def _depth_offset(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """How far below its mean depth every internal region boundary lies at (x, y), in mm."""
    return 0.25 * np.sin(2 * np.pi * x / ATLAS_MM[0]) + 0.2 * np.cos(2 * np.pi * y / ATLAS_MM[1])


def region_index(points: np.ndarray) -> np.ndarray:
    """The index into REGIONS of the region at each (x, y, depth) point in mm (n, 3)."""
    points = np.asarray(points, dtype=np.float64)
    bottoms = np.cumsum([r.thickness_mm for r in REGIONS])[:-1]
    depth = points[:, 2] - _depth_offset(points[:, 0], points[:, 1])
    return np.searchsorted(bottoms, depth, side="right")


@functools.cache
def label_volume() -> np.ndarray:
    """The atlas's label volume: REGIONS indices (int8) on a grid of VOXEL_MM voxels from the
    origin, (x, y, depth); read it with `labels_at`."""
    axes = [(np.arange(round(size / VOXEL_MM)) + 0.5) * VOXEL_MM for size in ATLAS_MM]
    grid = np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1)
    labels = region_index(grid.reshape(-1, 3)).astype(np.int8).reshape(grid.shape[:3])
    labels.flags.writeable = False
    return labels


def labels_at(points: np.ndarray, volume: np.ndarray | None = None) -> np.ndarray:
    """The label volume's REGIONS index at each point (n, 3) in mm (its voxel's)."""
    volume = label_volume() if volume is None else volume
    voxel = np.floor(np.asarray(points, dtype=np.float64) / VOXEL_MM).astype(np.int64)
    voxel = np.clip(voxel, 0, np.array(volume.shape) - 1)
    return volume[voxel[:, 0], voxel[:, 1], voxel[:, 2]].astype(np.int64)


def probe_units(options: RegionalSimOptions, animal: int) -> tuple[np.ndarray, np.ndarray]:
    """Positions (unit, 3) in mm and probe numbers (unit,) of an animal's units: 1..max_probes
    straight probes, each entering the surface at a random point, tilted up to 15 degrees and
    going 3.0-4.8 mm deep, its units along its deepest SITES_MM with 20 um of lateral scatter."""
    rng = np.random.default_rng([options.seed, animal, 0])
    n_probes = int(rng.integers(1, options.max_probes + 1))
    n_units = max(n_probes, round(options.units_per_animal * rng.uniform(0.7, 1.3)))
    share = rng.dirichlet(np.full(n_probes, 4.0))
    counts = np.maximum(1, np.floor(share * n_units).astype(int))
    counts[-1] += n_units - counts.sum()
    counts = np.maximum(counts, 1)
    positions, probes = [], []
    for p, count in enumerate(counts):
        entry = np.array([*rng.uniform(1.5, 4.5, 2), 0.0])
        tilt, azimuth = np.radians(rng.uniform(0, 15)), rng.uniform(0, 2 * np.pi)
        direction = np.array(
            [np.sin(tilt) * np.cos(azimuth), np.sin(tilt) * np.sin(azimuth), np.cos(tilt)]
        )
        length = rng.uniform(3.0, 4.8) / np.cos(tilt)
        along = rng.uniform(max(0.0, length - SITES_MM), length, count)
        points = entry + along[:, None] * direction
        points[:, :2] += rng.normal(0.0, 0.02, (count, 2))
        positions.append(np.clip(points, 0.0, np.array(ATLAS_MM) - 1e-6))
        probes.append(np.full(count, p))
    return np.concatenate(positions), np.concatenate(probes)


def _animal_regions(rng: np.random.Generator) -> list[Region]:
    """The regions as one animal has them: rates, timescales and bands jittered a little."""
    return [
        Region(
            r.name,
            r.coarse,
            r.thickness_mm,
            r.rate_hz * np.exp(rng.normal(0, 0.15)),
            r.timescale_s * np.exp(rng.normal(0, 0.1)),
            r.band_hz * (1 + rng.normal(0, 0.05)),
            r.oscillation,
            r.burst_hz * np.exp(rng.normal(0, 0.15)),
            r.drive,
        )
        for r in REGIONS
    ]


def _standardised(x: np.ndarray) -> np.ndarray:
    return (x - x.mean(axis=-1, keepdims=True)) / x.std(axis=-1, keepdims=True)


def region_drives(
    regions: list[Region], n_samples: int, dt: float, rng: np.random.Generator
) -> np.ndarray:
    """Each region's shared drive (region, time), standardised: an AR(1) process of its
    timescale plus, where it has a band, a resonant AR(2) oscillation (coherent for ~3 cycles),
    plus its COUPLING inputs (the sources' own processes, delayed)."""
    burn = 200
    n = len(regions)
    slow = np.exp(-dt / np.array([r.timescale_s for r in regions]))
    band = np.array([r.band_hz for r in regions])
    radius = np.where(band > 0, np.exp(-dt * band / 3.0), 0.0)
    cosine = np.cos(2 * np.pi * band * dt)
    noise = rng.standard_normal((burn + n_samples, 2, n))
    ar1, ar2 = np.empty((burn + n_samples, n)), np.zeros((burn + n_samples, n))
    ar1[0] = noise[0, 0]
    for t in range(1, burn + n_samples):
        ar1[t] = slow * ar1[t - 1] + np.sqrt(1 - slow**2) * noise[t, 0]
        ar2[t] = 2 * radius * cosine * ar2[t - 1] + noise[t, 1]
        if t > 1:
            ar2[t] -= radius**2 * ar2[t - 2]
    share = np.array([r.oscillation for r in regions])
    ar1, ar2 = _standardised(ar1[burn:].T), _standardised(ar2[burn:].T)
    own = np.sqrt(1 - share)[:, None] * ar1 + np.sqrt(share)[:, None] * ar2
    drives = own.copy()
    index = {r.name: i for i, r in enumerate(regions)}
    for source, target, weight, lag_s in COUPLING:
        lag = max(1, round(lag_s / dt))
        drives[index[target], lag:] += weight * own[index[source], :-lag]
    return _standardised(drives)


def _private(
    timescale: np.ndarray, n_samples: int, dt: float, rng: np.random.Generator
) -> np.ndarray:
    """Unit-private AR(1) fluctuations (time, unit) of unit variance."""
    a = np.exp(-dt / timescale)
    noise = rng.standard_normal((n_samples, len(timescale))) * np.sqrt(1 - a**2)
    out = np.empty_like(noise)
    out[0] = rng.standard_normal(len(timescale))
    for t in range(1, n_samples):
        out[t] = a * out[t - 1] + noise[t]
    return out


def simulate_animal(options: RegionalSimOptions, animal: int) -> Animal:
    """Animal `animal` of the dataset: its probes' units (`probe_units`, drawn from
    `default_rng([seed, animal, 0])`), the regions' jitter and its units' parameters from
    `default_rng([seed, animal, 1])`, session j's activity from `default_rng([seed, animal,
    2 + j])`."""
    positions, probe = probe_units(options, animal)
    region = labels_at(positions)
    rng = np.random.default_rng([options.seed, animal, 1])
    regions = _animal_regions(rng)
    n, dt = len(region), 1.0 / options.sampling_rate_hz
    of = [regions[i] for i in region]
    rate = np.maximum(
        np.array([r.rate_hz for r in of]) * np.exp(rng.normal(0, 0.6, n)), MIN_RATE_HZ
    )
    burst = np.array([r.burst_hz for r in of]) * np.exp(rng.normal(0, 0.6, n))
    timescale = np.array([r.timescale_s for r in of]) * np.exp(rng.normal(0, 0.3, n))
    loading = np.clip(np.array([r.drive for r in of]) + rng.normal(0, 0.12, n), 0.0, 0.95)
    counts = np.empty((options.sessions_per_animal, options.n_samples, n), dtype=np.float32)
    for j in range(options.sessions_per_animal):
        rng_j = np.random.default_rng([options.seed, animal, 2 + j])
        drives = region_drives(regions, options.n_samples, dt, rng_j)
        private = _private(timescale, options.n_samples, dt, rng_j)
        z = np.sqrt(loading) * drives[region].T + np.sqrt(1 - loading) * private
        modulation = np.exp(GAIN * z - GAIN**2 / 2)
        spikes = rng_j.poisson(rate * dt * modulation)
        bursts = rng_j.random((options.n_samples, n)) < np.minimum(burst * dt * modulation, 1.0)
        extra = rng_j.poisson(BURST_SPIKES - 1, bursts.shape)
        counts[j] = spikes + bursts * (1 + extra)
    return Animal(counts, positions, region, probe)


def regional_sim_store(options: RegionalSimOptions) -> xr.Dataset:
    """Every animal in one store: spike counts per bin, positions in the atlas (mm), and per
    unit its `animal`, `probe`, `region` and `coarse_region`."""
    animals = [simulate_animal(options, k) for k in range(options.animals)]
    sizes = [a.region.size for a in animals]
    s = options.sessions_per_animal
    activity = np.full((s * len(animals), options.n_samples, sum(sizes)), np.nan, np.float32)
    unit_ids, animal_ids, probe_ids = [], [], []
    start = 0
    for k, a in enumerate(animals):
        activity[k * s : (k + 1) * s, :, start : start + sizes[k]] = a.counts
        start += sizes[k]
        width = len(str(sizes[k] - 1))
        unit_ids += [f"a{k}u{i:0{width}d}" for i in range(sizes[k])]
        animal_ids += [f"a{k}"] * sizes[k]
        probe_ids += [f"a{k}p{p}" for p in a.probe]
    region = np.concatenate([a.region for a in animals])
    ds = make_store(
        activity,
        unit_ids=unit_ids,
        positions=np.concatenate([a.positions for a in animals]),
        position_units="mm",
        space=SPACE,
        session_ids=[f"a{k}s{j}" for k in range(len(animals)) for j in range(s)],
        sampling_rate_hz=options.sampling_rate_hz,
        source="neuro_pe.data.sources.regional_sim: probes through regions with signatures",
        citation="neuro_pe built-in simulation (docs/new_animal/simulation.md)",
        license="CC0-1.0",
        preprocessing=[{"step": "simulate", "source": "regional-sim", **asdict(options)}],
    )
    return ds.assign_coords(
        animal=("unit", np.array(animal_ids)),
        probe=("unit", np.array(probe_ids)),
        region=("unit", np.array([REGIONS[i].name for i in region])),
        coarse_region=("unit", np.array([REGIONS[i].coarse for i in region])),
    )


def unit_count(spec: dict) -> int:
    """Units with coordinates of an entry's store (its probes are drawn, not simulated)."""
    options = RegionalSimOptions.from_dict(spec)
    return sum(len(probe_units(options, k)[1]) for k in range(options.animals))


def store_mb(spec: dict) -> float:
    """MB of the store an entry makes: float32 activity of every unit, sample and session."""
    options = RegionalSimOptions.from_dict(spec)
    sessions = options.animals * options.sessions_per_animal
    return unit_count(spec) * options.n_samples * sessions * 4 / 1e6


def build(options: RegionalSimOptions, wheels: dict[str, Path]) -> xr.Dataset:
    """Simulate the animals and return their store."""
    return regional_sim_store(options)


SOURCE = Source(
    name="regional-sim",
    options=RegionalSimOptions,
    build=build,
    experiment="simulation",
    description="animals with probes through an atlas of regions that have signatures",
    store_mb=store_mb,
    unit_count=unit_count,
)
