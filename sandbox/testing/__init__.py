"""The Sandbox contract as a kit a backend's tests import (docs/plugins.md, "A sandbox backend").

:class:`SandboxContract` holds the checks every :class:`sandbox.backend.Sandbox` must pass,
as pytest test methods. A backend's test module subclasses it (the class named ``Test...``),
implements :meth:`SandboxContract.make_sandbox`, and declares in
:attr:`SandboxContract.limitations` what it legitimately cannot do (see :data:`LIMITATIONS`)::

    from sandbox.testing import SandboxContract

    class TestMySandbox(SandboxContract):
        def make_sandbox(self, spec):
            return MySandbox(spec)

The kit needs pytest, which importing it imports; nothing of the product imports it.
"""

from sandbox.testing.contract import (
    LIMITATIONS,
    Limitation,
    SandboxContract,
    SandboxFactory,
    run,
    stdout_of,
)

__all__ = ["LIMITATIONS", "Limitation", "SandboxContract", "SandboxFactory", "run", "stdout_of"]
