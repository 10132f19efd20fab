"""ContainerTarget tells "`pct` itself is missing" from "a program inside the container is"."""

from __future__ import annotations

import pytest

from dflash_tui.remote.base import TargetError
from dflash_tui.remote.container import ContainerTarget
from dflash_tui.remote.local import LocalTarget


async def test_missing_pct_on_the_host_is_named(tmp_path):
    # A host without Proxmox: the PATH has no `pct` at all.
    host = LocalTarget(env={"PATH": str(tmp_path)})
    with pytest.raises(TargetError, match="`pct` not found"):
        await ContainerTarget(host, "pct:200").run(["true"])


async def test_a_program_missing_inside_the_container_is_a_result_not_a_missing_pct(standin):
    # Both exit 127 through `pct exec`; only the first is "pct not found".
    spec = standin.container("pct:200")
    target = ContainerTarget(LocalTarget(env=standin.env), spec)
    res = await target.run(["/nonexistent/python9", "-V"])
    assert res.exit_status == 127
    assert "python9" in res.stderr
