"""Thresholds on line density: the page mean and the Gaussian optimal threshold.

Wenenr (commenting on Champandard's article) models the densities of text lines (y)
and markup lines (z) as two normal distributions with prior p = |y| / (|y| + |z|)
and asks for the density where either class is equally probable:

    p N(x; mu_y, var_y) = (1 - p) N(x; mu_z, var_z).

Taking logs gives a quadratic in x, solved here. The comment's closed form
(mu_y t_y - mu_z t_z +- sqrt(t_y t_z)(mu_y - mu_z)) / (t_y - t_z) with
t = var ln(prior) does not solve this equation: it drops the 1/sigma of the
normal densities and the factor 1/2 of the exponent (its worked example also
slips: sigma written for sigma squared, and 0.0466 ln 0.6 is -0.0238, not
-0.238). On the comment's example it gives 0.473, where the weighted densities are
not equal; the root of the equation between the two class means is 0.385.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

# A class of identical densities (a single line, say) has zero variance, a spike
# that no threshold can sit beside. Variances are floored at this value
# (a standard deviation of 0.01 in density) so the Gaussians stay usable.
VARIANCE_FLOOR = 1e-4
MAX_ITERATIONS = 50
Values = Sequence[float] | npt.NDArray[np.float64]


def mean_threshold(values: Values) -> float:
    """The page's average density (0 for a page without lines)."""
    return float(np.mean(values)) if len(values) else 0.0


def optimal_threshold(mean_y: float, var_y: float, mean_z: float, var_z: float,
                      p: float) -> float | None:
    """Where p N(x; mean_y, var_y) = (1 - p) N(x; mean_z, var_z), between the two means.

    `y` is the class of higher mean (text lines). Returns None when no root lies
    strictly between the means (one class is likelier over the whole interval).
    """
    if not 0.0 < p < 1.0 or mean_y <= mean_z:
        return None
    var_y, var_z = max(var_y, VARIANCE_FLOOR), max(var_z, VARIANCE_FLOOR)
    # log(p N_y) - log((1-p) N_z) = a x^2 + b x + c
    a = 1.0 / (2.0 * var_z) - 1.0 / (2.0 * var_y)
    b = mean_y / var_y - mean_z / var_z
    c = (mean_z**2 / (2.0 * var_z) - mean_y**2 / (2.0 * var_y)
         + math.log(p / (1.0 - p)) + 0.5 * math.log(var_z / var_y))
    if a == 0.0:  # equal variances: a linear equation
        roots = [-c / b]
    else:
        discriminant = b * b - 4.0 * a * c
        if discriminant < 0.0:
            return None
        # The stable form of the two roots: with nearly equal variances a is tiny and
        # (-b + sqrt(...)) / 2a loses every digit to cancellation; c / q does not.
        q = -0.5 * (b + math.copysign(math.sqrt(discriminant), b))
        roots = [q / a, c / q] if q else [0.0]
    between = [r for r in roots if mean_z < r < mean_y]
    return between[0] if between else None


def gaussian_threshold(values: Values) -> float:
    """The Gaussian optimal threshold estimated on the page itself, by iterating to a fixed point.

    Start from the mean as split (lines at or above it are text), fit a normal
    to each side, move the split to the optimal threshold, re-split, and stop
    when the split no longer changes the classes (or after MAX_ITERATIONS).
    Degenerate pages keep the last split: fewer than two lines, all lines equal
    (one class empty), or no root between the class means.
    """
    x: npt.NDArray[np.float64] = np.asarray(values, dtype=np.float64)
    threshold = mean_threshold(x)
    if x.size < 2:
        return threshold
    text = x >= threshold
    for _ in range(MAX_ITERATIONS):
        y, z = x[text], x[~text]
        if y.size == 0 or z.size == 0:
            break
        found = optimal_threshold(*_mean_var(y), *_mean_var(z), y.size / x.size)
        if found is None:
            break
        threshold = found
        new_text = x >= threshold
        if not (new_text ^ text).any():
            break
        text = new_text
    return threshold


def _mean_var(v: npt.NDArray[np.float64]) -> tuple[float, float]:
    """np.mean(v) and np.var(v), with numpy's own arithmetic (the sum over the count,
    the mean of the squared deviations) but without the argument handling of those
    functions, which costs more than the sums on a page's few hundred lines."""
    n = v.size
    mean = float(np.add.reduce(v)) / n
    deviation = v - mean
    return mean, float(np.add.reduce(deviation * deviation)) / n
