import math

import pytest
import torch

from agentcollapse.diagnostics import EMA, ProxyEMAState, proxy_metrics, zscore_with_sigma


def test_first_value_initialises_then_decays():
    e = EMA(decay=0.9)
    assert math.isnan(e.value) and not e.initialized
    assert e.update(2.0) == 2.0
    assert e.update(4.0) == pytest.approx(0.9 * 2.0 + 0.1 * 4.0)
    assert e.update(1.0) == pytest.approx(0.9 * 2.2 + 0.1 * 1.0)
    assert e.value == pytest.approx(2.08)


def test_nan_ignored():
    e = EMA(0.5)
    assert math.isnan(e.update(float("nan")))  # nothing yet
    assert not e.initialized
    e.update(3.0)
    assert e.update(float("nan")) == 3.0
    assert e.update(float("inf")) == 3.0
    assert e.count == 1
    assert e.update(1.0) == pytest.approx(2.0)


def test_state_dict_roundtrip():
    e = EMA(0.8)
    for x in (1.0, 5.0, 2.0):
        e.update(x)
    f = EMA()
    f.load_state_dict(e.state_dict())
    assert f.value == e.value and f.decay == 0.8 and f.count == 3
    assert f.update(7.0) == e.update(7.0)


def _batch(seed, rows=12, cols=4):
    g = torch.Generator().manual_seed(seed)
    L = -torch.rand(rows, cols, generator=g) * 40
    z = torch.randint(1, 30, (rows,), generator=g)
    rc = torch.arange(rows) % cols
    return L, z, rc


def test_proxy_ema_state_uses_ema_sigma():
    st = ProxyEMAState(decay=0.9)
    L1, z1, rc1 = _batch(0)
    m1 = st.update(L1, z1, rc1)
    # first step: EMA sigma == this step's sigma, so the EMA z-scores equal the plain ones
    assert m1["marginal_std_ema"] == pytest.approx(m1["marginal_std"])
    assert m1["mi_zscore_ema"] == pytest.approx(m1["mi_zscore"])
    assert m1["mi_zscore_ema_seq"] == pytest.approx(m1["mi_zscore_seq"])

    L2, z2, rc2 = _batch(1)
    m2_plain = proxy_metrics(L2, z2, rc2)
    m2 = st.update(L2, z2, rc2, metrics=m2_plain)
    sig = 0.9 * m1["marginal_std"] + 0.1 * m2_plain["marginal_std"]
    sig_seq = 0.9 * m1["marginal_std_seq"] + 0.1 * m2_plain["marginal_std_seq"]
    assert m2["marginal_std_ema"] == pytest.approx(sig)
    assert m2["marginal_std_seq_ema"] == pytest.approx(sig_seq)
    assert m2["mi_zscore_ema"] == pytest.approx(zscore_with_sigma(L2, z2, rc2, sig))
    assert m2["mi_zscore_ema_seq"] == pytest.approx(zscore_with_sigma(L2, z2, rc2, sig_seq, per_token=False))
    assert m2["mi_zscore_ema"] != pytest.approx(m2["mi_zscore"])
    for k, v in m2_plain.items():  # the plain metrics are passed through
        assert m2[k] == v

    # an empty batch leaves the EMAs untouched
    empty = st.update(torch.zeros(0, 4), torch.zeros(0), torch.zeros(0, dtype=torch.long))
    assert math.isnan(empty["mi_zscore_ema"]) and empty["marginal_std_ema"] == pytest.approx(sig)

    # checkpoint roundtrip
    restored = ProxyEMAState()
    restored.load_state_dict(st.state_dict())
    L3, z3, rc3 = _batch(2)
    assert restored.update(L3, z3, rc3) == st.update(L3, z3, rc3)
