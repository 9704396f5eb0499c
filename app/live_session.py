"""The window's live session: an engine built and stepped on the worker thread, its new records
pulled at 25 Hz and drawn as often as the frame pacer allows (by default 3 % of one core, so the
engine keeps the machine, and while it holds a frame back the timer sleeps; View → Smooth redraw
lifts it), the controls posted to its mailbox, and t(N) re-measured on request. Records are never
dropped: a stopped or failed session's stay shown.

A part of MainWindow (app/main_window.py), whose history, calibration, dashboard, controls and
banner it shares with the replay of a trace."""
from __future__ import annotations

from dataclasses import replace

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QLabel

from app.agent_rows import AgentRow
from app.engine_factory import EngineSpec
from app.frame_pacer import ENGINE_FIRST_SHARE, SMOOTH_SHARE, FramePacer
from app.history import History
from app.session_traces import SessionTraces
from app.views.transcript_view import TRANSCRIPT_CHARS
from app.worker import EngineBuilder, EngineHost
from engine.errors import SwarmscopeError
from engine.loading import check_model_folder
from engine.serve.http_api import ApiServer
from engine.thread_tuner import AUTO

FRAME_MS = 40  # 25 Hz: views redraw from the ring buffers on this timer, never once per step
# Step records, and events, a live window keeps (its plots keep every step's numbers; the trace,
# everything): the views read the newest few hundred, and a record is ~1.5 KB.
LIVE_KEPT = 20_000


class LiveSessionMixin:
    def _init_live_session(self, traces: SessionTraces | None) -> None:
        self.engine = None
        self.host: EngineHost | None = None
        self._stuck_hosts: list[EngineHost] = []
        self.traces = traces or SessionTraces()  # where live sessions are recorded
        self._spec: EngineSpec | None = None  # what the last session was started from
        self._trace_error_shown = False  # the live engine's trace stopped, and the user was told
        self._record_seq = self._event_seq = 0
        self.pacer = FramePacer()
        self._undrawn = False  # records pulled but not drawn yet (the pacer held the frame)
        self.timer = QTimer(self)
        self.timer.setInterval(FRAME_MS)
        self.timer.timeout.connect(self.poll)
        self.server: ApiServer | None = None  # OpenAI's API, answered by the live engine
        self.api_label = QLabel()  # in the status bar while serving
        self.api_label.setToolTip("OpenAI's chat completions API: each conversation a client "
                                  "agent of the live session (category 'api'); the answers "
                                  "given so far and their mean time to a first token (/metrics "
                                  "has them all)")
        self.api_label.setContentsMargins(16, 0, 0, 0)  # apart from the KV cache's, beside it
        self.api_label.hide()
        self.kv_label = QLabel()  # in the status bar while a live engine runs
        self.kv_label.hide()

    def start_session(self, spec: EngineSpec) -> None:
        """A live session of `spec`'s model, recorded where `traces` says (`spec.trace_out` is
        set here)."""
        unrecorded = None
        try:
            trace = self.traces.next(replayed=self.trace_path if self.replaying else None)
        except OSError as exc:  # a read-only or misplaced data dir: run, unrecorded
            trace, unrecorded = None, (f"this session is not recorded: cannot write its trace "
                                       f"({exc.filename}: {exc.strerror}); --trace-out FILE "
                                       "records elsewhere")
        self.start_live(replace(spec, trace_out=trace, serving=self.server is not None))
        if unrecorded:
            self.show_error(unrecorded, records_kept=False)

    def serve(self, host: str, port: int) -> None:
        """Answer OpenAI's chat completions API at host:port with whichever engine is live (503
        while none is); SwarmscopeError where the address cannot be had. Sessions started from
        now on size their KV cache for the clients too."""
        self.stop_serving()
        self.server = ApiServer(lambda: self.engine, host, port).start()
        self._show_api()
        self.api_label.show()
        self.serve_action.setChecked(True)

    def stop_serving(self) -> None:
        """Requests in flight are answered by the engine as it runs; new ones are refused."""
        if self.server is not None:
            self.server.close()
            self.server = None
            self.api_label.hide()
            self.serve_action.setChecked(False)

    def start_live(self, spec: EngineSpec | None = None, build: EngineBuilder | None = None) -> None:
        """Start an engine on the worker thread: from `spec`, or from `build` (tests, benches).
        The views start afresh; the last session's records stay in its trace."""
        self.stop_engine()
        self._leave_replay()
        self.banner.hide()
        if len(self.history) or self.calibration is not None:  # views that showed something
            self.history = History(keep=LIVE_KEPT)
            self.calibration = None  # the new engine's, once it is ready
            self._new_dashboard()
        self._spec = spec
        self.trace_path = spec.trace_out if spec else None
        self.host = EngineHost(build or spec.build, self)
        # Bound methods of the window, never lambdas: PySide runs a lambda on the emitting (worker)
        # thread, and a widget touched there can crash the app (an engine failure's banner did).
        self.host.worker.progress.connect(self._on_progress)
        self.host.worker.ready.connect(self._on_ready)
        self.host.worker.recalibrated.connect(self._on_recalibrated)
        self.host.worker.failed.connect(self._on_failed)
        self.progress.show()
        self.host.start()

    def load_model(self, folder: str) -> None:
        """A new live session on the model in `folder`, with the last session's dtype and device
        and the swarm size and CPU threads the controls show; a folder that would not load is
        refused before the session shown stops."""
        try:
            check_model_folder(folder)
        except SwarmscopeError as exc:
            self.show_error(f"{exc}; nothing changed", records_kept=False)
            return
        spec = self._spec or EngineSpec()
        # the CPU threads chosen live, asked for again: torch keeps a count per thread, and the
        # new session runs on a thread of its own
        threads = spec.threads if self.engine is None else \
            AUTO if self.engine.thread_tuner is not None else self.calibration.threads
        self.start_session(replace(spec, model=folder, agents=self.controls.swarm_size.value(),
                                   threads=threads))

    def _on_progress(self, message: str, fraction: float) -> None:
        self.statusBar().showMessage(message)
        self.progress.setValue(int(100 * fraction))
        self.progress.setVisible(fraction < 1.0)

    def _on_failed(self, message: str) -> None:
        self.show_error(message, records_kept=len(self.history) > 0)

    def _on_ready(self, engine) -> None:
        self.engine = engine
        self._record_seq = self._event_seq = 0
        self._trace_error_shown = False
        self.show_calibration(engine.calibration, tuned=engine.thread_tuner is not None)
        self.controls.set_controls(engine.controls)
        self.controls.setEnabled(True)
        self.controls.recalibrate_button.setEnabled(True)
        self._sync_ceilings()
        self.timer.start(FRAME_MS)

    def poll(self, force: bool = False) -> None:
        """Pull what the engine recorded since the last frame, then redraw once if the pacer
        allows and the window is not minimized (`force`: now, every view, as for a screenshot).
        Minimized, Qt paints nothing, but the views' data updates would still take the engine's
        CPU; the first tick after the window comes back draws what it missed."""
        engine = self.engine
        if engine is None:
            return
        if engine.trace_error and not self._trace_error_shown:  # once: the session runs on
            self._trace_error_shown = True
            self.show_error(engine.trace_error)
        records, self._record_seq = engine.records.since(self._record_seq)
        events, self._event_seq = engine.events.since(self._event_seq)
        self.history.extend(records)
        self.history.add_events(events)
        if records:
            self._show_kv(engine)
        if self.server is not None:  # answers end between steps too
            self._show_api()
        self._undrawn = self._undrawn or bool(records or events)
        if force or (self._undrawn and not self.isMinimized() and self.pacer.ready()):
            self._undrawn = False
            self.dashboard.show_history(self.history, len(self.history),
                                        agents=lambda: self._live_agents(engine), force=force)
        # The next tick when the pacer may allow a frame, not at 25 Hz meanwhile: each tick takes
        # the GIL from the engine (the records wait in its ring buffer).
        self.timer.setInterval(max(FRAME_MS, int(1000 * self.pacer.wait_s())))

    def _show_kv(self, engine) -> None:
        """How full the KV cache is, what shared prefixes saved, and whether lanes lost their
        KV for want of room: the headroom a larger swarm or batch ceiling has."""
        kv = engine.kv_usage()
        self.kv_label.setText(f"KV cache {kv.held_bytes / kv.total_bytes:.0%} held · "
                              f"{kv.shared_tokens:,} prompt tokens shared · "
                              f"{kv.preemptions} preempted")
        self.kv_label.setToolTip(
            f"The KV cache holds {kv.held_bytes / 1e6:.1f} of {kv.total_bytes / 1e6:.1f} MB now, "
            f"{kv.peak_bytes / 1e6:.1f} MB at most so far (a recurrent model's per-sequence "
            "states included). Shared: prompt tokens new sequences started with from the KV "
            "blocks of a prefix another holds, neither fed nor held again (with recurrent "
            "layers, Qwen3.5's, only where a holder's state, or one kept for later tasks, "
            "stands at the prefix's end). Preempted: "
            "times a sequence lost its KV for want of room (it is fed again).")
        self.kv_label.show()

    def _show_api(self) -> None:
        """Where the API is served, and how its clients fare: answers given, the mean wait for
        their first token."""
        answered, waited, firsts = self.server.served.read(lambda served: (
            sum(served.answers.values()), served.first_token_s.total, served.first_token_s.count))
        self.api_label.setText(f"API {self.server.url}" + (
            f" · {answered} answered, first token in {waited / firsts:.2f} s" if firsts else ""))

    def _live_agents(self, engine) -> list[AgentRow]:
        """The engine's agents, decoding only the shown agent's transcript tail."""
        shown = self.dashboard.agents.selected
        views = engine.agents(set() if shown is None else {shown}, TRANSCRIPT_CHARS)
        return [AgentRow.from_view(view) for view in views]

    def _set_smooth(self, smooth: bool) -> None:
        self.pacer.share = SMOOTH_SHARE if smooth else ENGINE_FIRST_SHARE
        self.timer.setInterval(FRAME_MS)  # not the wait the old share set

    def _post_controls(self, changes: dict) -> None:
        if self.engine is not None:
            self.engine.mailbox.post(**changes)
        self._sync_ceilings()

    def _recalibrate(self) -> None:
        """Re-measure t(N) on the worker thread between steps; the views keep drawing meanwhile."""
        if self.host is not None and self.engine is not None:
            self._replanning(True)
            self.host.worker.request_recalibration()

    def _switch_threads(self, threads: int | str) -> None:
        """Switch the CPU threads on the worker thread between steps: the count's cached curve,
        or one measured now; the views keep drawing meanwhile."""
        if self.host is not None and self.engine is not None:
            self._replanning(True)
            self.host.worker.request_threads(threads)

    def _on_recalibrated(self, calibration) -> None:
        self.show_calibration(calibration, tuned=self.engine is not None
                              and self.engine.thread_tuner is not None)
        self._replanning(False)

    def _replanning(self, busy: bool) -> None:
        """While a new curve is measured, neither control can ask for another."""
        for widget in (self.controls.threads, self.controls.recalibrate_button):
            widget.setEnabled(not busy and self.engine is not None)
        if busy:
            self.progress.show()

    def stop_engine(self) -> None:
        """Stop the worker and wait for it; the history (and the trace file) stay."""
        self.timer.stop()
        if self.host is not None:
            if not self.host.stop():
                # Stuck in one long call that reports no progress: keep the host referenced so
                # its QThread is never destroyed while running (Qt aborts the process if it is).
                self.show_error("the engine did not stop in time; it is left to finish")
                self._stuck_hosts.append(self.host)
            self.poll(force=True)  # the last records since the previous frame, drawn
            self.host = None
        self.engine = None
        self.controls.setEnabled(False)

    def join_threads(self, timeout_ms: int = 20_000) -> bool:
        """Wait (bounded) for engines that did not stop when asked; True if none still runs."""
        self._stuck_hosts = [h for h in self._stuck_hosts if not h.thread.wait(timeout_ms)]
        return not self._stuck_hosts
