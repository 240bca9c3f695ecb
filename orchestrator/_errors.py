"""toolfleet's exceptions: two roots, and the tree of every class under them.

Every failure toolfleet raises is a ``ToolfleetError``: its message is a sentence for the user, and a
backend's error (Docker, Celery, Redis) is translated into one where it is caught, ``raise ... from exc``.
What toolfleet raises to unwind rather than to report a failure (a limit reached, a sample ended by an
operator, an internal hand-back) is a ``ControlFlowSignal``: whoever catches it turns it into an outcome.
Both are ``Exception`` subclasses, as Inspect's exceptions are, so ported code catches them where it did.

The roots live here, in the lowest layer both halves import; each class stays in the module that raises
it (so every layer still points down) and is drawn below. ``(Base)``: a builtin base kept beside the
toolfleet parent, so ``except ValueError`` and the like keep working; "Inspect" marks a name (and its
bases) kept from ``inspect_ai``. ``tests/test_errors_tree.py`` checks this drawing against the code.

Tree::

    ToolfleetError                                  orchestrator._errors
    ├─ SetupError (ValueError)                      orchestrator._errors                  fixed by the user, one line
    │  ├─ TaskError                                 orchestrator.eval._task               task file, name or -T
    │  ├─ UnknownModelError                         orchestrator.eval._policies
    │  ├─ PolicyFileError                           orchestrator.eval._errors             approval/review YAML
    │  ├─ ReducerError                              orchestrator.eval._reducers
    │  ├─ LogFormatError                            orchestrator.eval._log_file           not a toolfleet log
    │  ├─ BrokerUnreachableError                    orchestrator.eval._errors
    │  ├─ DockerUnreachableError                    orchestrator.eval._errors
    │  ├─ FleetMisconfiguredError                   orchestrator.eval._errors             workers reject us
    │  ├─ PreflightError                            orchestrator.dispatch._preflight      found before sample 1
    │  └─ MissingSecretError (RuntimeError)         workers.fleet._auth                   no or short secret
    ├─ ToolError                                    orchestrator.tool._errors             Inspect; model sees it
    │  ├─ ToolParsingError                          orchestrator.tool._errors             Inspect
    │  ├─ ToolApprovalError                         orchestrator.tool._errors             Inspect
    │  ├─ AgentDepthError                           orchestrator.agent._nested
    │  ├─ CommandOutOfMemoryError                   workers.sandbox._errors               sandbox still running
    │  ├─ ExecAgentLostError                        workers.sandbox._errors               output lost, agent back
    │  └─ _Missing                                  orchestrator.tool._tools._text_editor
    ├─ ToolExecutionFatal                           orchestrator._wire                    a tool's fatal error
    ├─ ToolGuardrailTripwire                        orchestrator.tool._guardrails
    ├─ ToolNotRegisteredError (LookupError)         orchestrator.tool._registry
    ├─ ToolTimeoutError (TimeoutError)              workers.executor                      timeout_behavior=raise
    ├─ ToolModuleError (RuntimeError)               workers._tool_modules                 --import failed
    ├─ SandboxUnavailableError (RuntimeError)       orchestrator.util._sandbox            Inspect; sandbox gone
    │  ├─ SandboxLostError                          orchestrator.util._sandbox            lost mid-sample
    │  ├─ SandboxOutOfMemoryError                   workers.sandbox._errors
    │  └─ SandboxCapacityError                      workers.sandbox._errors               host cap reached
    ├─ SandboxTimeoutError (TimeoutError)           orchestrator.util._sandbox            Inspect
    ├─ OutputLimitExceededError                     orchestrator.util._sandbox            Inspect
    ├─ SandboxImageError (RuntimeError)             workers.sandbox._errors
    ├─ _PullFailed                                  workers.sandbox.docker._pull          -> SandboxImageError
    ├─ SandboxCallError (RuntimeError)              orchestrator.scorer._sandbox_proxy    could not run at all
    ├─ SnapshotError (RuntimeError)                 orchestrator.util._snapshot
    ├─ ComposeError (ValueError)                    orchestrator.util._compose
    ├─ ChannelClosed (ConnectionError)              workers.sandbox._channel              exec agent channel
    ├─ EgressError                                  workers.egress._errors
    ├─ AdmissionRefused (ValueError)                workers._bounds                       a worker says no
    ├─ NoCapacityError                              workers.fleet._placement              placement waits
    │  ├─ NoLiveHostError                           workers.fleet._placement
    │  ├─ FairShareError                            workers.fleet._placement
    │  └─ SandboxTooLargeError                      workers.fleet._placement              waiting cannot help
    ├─ ModelError                                   orchestrator.model._model             failed for good
    ├─ BatchError                                   orchestrator.model._batch._backend    one batch attempt
    ├─ MalformedResponseError (ValueError)          orchestrator.model._providers._anthropic_wire
    ├─ PriceFileError (ValueError)                  orchestrator.model._pricing
    ├─ SampleFilesError (ValueError)                orchestrator.dataset._files
    ├─ HarborTaskError (ValueError)                 orchestrator.dataset._harbor
    ├─ TaskConfigError (ValueError)                 orchestrator.dataset._harbor_config   task.toml
    ├─ NetworkConfigError (ValueError)              orchestrator.dataset._harbor_network  task.toml's network
    ├─ TaskEnvError (ValueError)                    orchestrator.dataset._harbor_env      ${VAR} not passed
    ├─ TaskTreeError (ValueError)                   orchestrator.dataset._harbor_tree     task dir read as data
    ├─ ComposeTaskError (ValueError)                orchestrator.dataset._harbor_compose
    ├─ HarborBuildError (RuntimeError)              orchestrator.dataset._harbor_images
    ├─ HarborOracleError (RuntimeError)             orchestrator.solver._harbor
    ├─ RewardError (ValueError)                     orchestrator.scorer._harbor_rewards
    ├─ AgentProcessesError (RuntimeError)           orchestrator.scorer._harbor_stop      agent left processes
    ├─ VerifierSetupError (RuntimeError)            orchestrator.scorer._harbor
    └─ NoTerminalError (RuntimeError)               orchestrator.approval._console
    ControlFlowSignal                               orchestrator._errors
    ├─ LimitExceededError                           orchestrator.util._limit_errors       Inspect; ends as a limit
    ├─ TerminateSampleError (RuntimeError)          orchestrator.util._limit_errors       Inspect; operator limit
    ├─ _SampleFailed                                orchestrator.eval._runner             attempt -> retry loop
    ├─ _ErrorThresholdReached                       orchestrator.eval._eval               fail_on_error: stop
    ├─ _Cancelled                                   orchestrator.approval._console        prompt dismissed
    ├─ _ToolTimedOut                                workers.executor                      -> a timeout error
    └─ CallRunningElsewhere                         workers._call_memory                  another worker answers

Aliases (the same class under the name it had, kept where it was public)::

    EvalSetupError          = SetupError            orchestrator.eval
    SandboxSetupError       = SetupError            workers.sandbox_host
    SnapshotHostLostError   = SandboxLostError      workers.fleet
    ScorerExecError         = SandboxCallError      orchestrator.scorer

``ExecAgentLostError`` is not a lost sandbox: the sandbox is intact, only the running command's output
was lost, so it stays a ``ToolError`` the model sees and the sample goes on.
"""

from __future__ import annotations

__all__ = ["ControlFlowSignal", "SetupError", "ToolfleetError"]


class ToolfleetError(Exception):
    """Root of every failure toolfleet raises; the message is a sentence for the user."""


class SetupError(ToolfleetError, ValueError):
    """Something the user fixes before anything runs: a command-line flag, a task or policy file, a broker or
    Docker daemon that does not answer, a prerequisite ``toolfleet setup`` cannot install, a sample's setup
    script that fails. The CLI prints its message as one line (no traceback) and exits 1."""


class ControlFlowSignal(Exception):
    """Root of the exceptions raised to unwind, not to report a failure: whoever catches one turns it into
    an outcome (a limit, a stopped eval, a hand-back). An ``Exception`` still, as Inspect's are, so code
    ported from Inspect catches them where it did."""
