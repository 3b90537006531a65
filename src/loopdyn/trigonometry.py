"""Sine and versine (``1 - cos``) of joint angles as vectorisable arithmetic.

XLA's CPU ``sin``/``cos`` in float64 call the scalar C library (about 35-45 ns per angle for
both on a 2-core EPYC), and XLA treats them as cheap: it recomputes them inside every fused
matrix product that reads them. Here each angle is reduced to ``q = k pi/2 + r`` with
``|r| <= pi/4`` (Cody-Waite: ``pi/2`` split in three parts, the first two of 33 bits so
``k * part`` is exact for ``|k| < 2^20``), and ``sin r`` and ``1 - cos r`` come from their Taylor
series to ``r^17`` and ``r^18`` (truncation below ``1e-19``, both by one Horner recursion over a
two-row array), rotated by ``k`` quarter turns with the sine and cosine of ``k pi/2`` read from a
table (products with 0 and +-1: exact): only multiplies, adds and one gather, which XLA vectorises
over states (about 3 ns per angle). The versine is computed directly, so it
keeps full relative accuracy for small angles, where ``1 - cos q`` cancels. A batch holding an
angle beyond `REDUCTION_LIMIT` (or a NaN) is computed by the library instead; the choice is a
``lax.cond``, whose outputs XLA materialises once. This is a float64 CPU path: elsewhere the
library's functions are used.
"""

import decimal
import math

import jax
import jax.numpy as jnp
import numpy as np

from . import placement

REDUCTION_LIMIT = 1.0e5  # |q| up to which the three-part reduction is used (k < 2^17)

_PI = decimal.Decimal("3.14159265358979323846264338327950288419716939937510582097494459")


def _half_pi_parts():
    """``pi/2 = p1 + p2 + p3`` with ``p1``, ``p2`` of at most 33 significant bits and ``p3`` a
    double."""
    with decimal.localcontext(decimal.Context(prec=60)):
        rest, parts = _PI / 2, []
        for bits in (32, 65):  # fractional bits: pi/2 is in [1, 2), its remainder below 2^-33
            part = decimal.Decimal(round(rest * 2**bits)) / 2**bits
            parts.append(float(part))
            rest -= part
        return (*parts, float(rest))


_P1, _P2, _P3 = _half_pi_parts()
_SIN = [(-1) ** j / math.factorial(2 * j + 1) for j in range(9)]  # r^(2j+1) coefficients
_VERSINE = [(-1) ** j / math.factorial(2 * j + 2) for j in range(9)]  # r^(2j+2) coefficients


def _series(z):
    """``(S(z), V(z))`` with ``sin r = r S(r^2)`` and ``1 - cos r = r^2 V(r^2)``, both by Horner's
    rule at once (one array of two rows: one operation per step for both)."""
    coefficients = np.array([_SIN, _VERSINE]).reshape((2, len(_SIN)) + (1,) * z.ndim)
    z = jnp.broadcast_to(z, (2,) + z.shape)
    out = coefficients[:, -1]
    for j in range(len(_SIN) - 2, -1, -1):
        out = out * z + coefficients[:, j]
    return out


_TURNS = np.array([[0.0, 1.0, 0.0, -1.0], [1.0, 0.0, -1.0, 0.0]])  # sin, cos of k pi/2, k mod 4


def _reduced(q):
    k = jnp.round(q * (2.0 / math.pi))
    r = ((q - k * _P1) - k * _P2) - k * _P3
    z = r * r
    series = _series(z)
    sin, versine = r * series[0], z * series[1]
    # q = k pi/2 + r: sin q = s_k cos r + c_k sin r, 1 - cos q = (1 - c_k) + c_k (1 - cos r)
    # + s_k sin r, exact where (s_k, c_k) is (0, 1), (1, 0), (0, -1) or (-1, 0)
    s_k, c_k = placement.take(jnp.asarray(_TURNS), k.astype(jnp.int32) & 3, axis=1)
    return s_k * (1.0 - versine) + c_k * sin, ((1.0 - c_k) + c_k * versine) + s_k * sin


def _library(q):
    return jnp.sin(q), 1.0 - jnp.cos(q)


def _reduced_or_library(q):
    reducible = jnp.max(jnp.abs(q)) <= REDUCTION_LIMIT
    return jax.lax.cond(reducible, _reduced, _library, q)


@jax.custom_jvp
def sin_versine(q):
    """``(sin q, 1 - cos q)`` elementwise: within ``eps/2`` (sine) and ``eps`` (versine) of the
    exact values for ``|q| <= REDUCTION_LIMIT``, the versine also to ``2 eps`` relative for small
    ``q``. The arithmetic path is taken for float64 on CPU; other dtypes and platforms (whose
    ``sin`` is native, and where a ``cond`` would cost a device-to-host copy) use the library."""
    q = jnp.asarray(q)
    if q.dtype != jnp.float64 or q.size == 0:
        return _library(q)
    return jax.lax.platform_dependent(q, cpu=_reduced_or_library, default=_library)


@sin_versine.defjvp
def _sin_versine_jvp(primals, tangents):
    (q,), (dq,) = primals, tangents
    sin, versine = sin_versine(q)
    return (sin, versine), ((1.0 - versine) * dq, sin * dq)
