"""`lo-orch dashboard`: one full-screen place to watch a run and answer it (issue 17).

The view is the run's published state, read by the same functions as `lo-orch status`
(``core.status_document``, ``core.status_rows``), refreshed when a file under
``.orchestration/`` changes (watchdog; a rename of a temp file counts) and on a slow clock
for the ages. Only the selected task's pane is captured, through the run's ``TmuxBackend``.

Every action calls the function behind the command it mirrors, so it keeps that command's
rules (a gate is refused from inside a managed session, Gate 2 is bound to the reviewed
commit): attach (``attach.attach_command``, with the app suspended), send
(``runs.send_message``), retry (``runs.retry_task``), Gate 1 (``runs.approve_plan``) and
Gate 2 (``integration.review`` then ``integration.merge``). A gate is a person's act: each
asks for a confirmation whose default is "no". Permission requests are answered with
``permissions.answer`` (issue 17a's `lo-orch permit`) where that module exists.

Modules: ``view`` (what is shown: plain functions), ``screens`` (dialogs and the gate
screens), ``app`` (the Textual app and ``run_dashboard``).
"""
