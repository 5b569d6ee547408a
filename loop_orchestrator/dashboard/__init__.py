"""`lo-orch dashboard`: one full-screen place to watch a run and answer it.

The view is the run's published state, read by the same function as `lo-orch status`
(``commands.status.status``), refreshed when a file under ``.orchestration/`` changes
(watchdog; a rename of a temp file counts) and on a slow clock for the ages. Only the
selected task's pane is captured, through the run's ``TmuxBackend``.

Every action calls the application function of the command it mirrors (``commands/``),
so it keeps that command's rules (a gate is refused from inside a managed session, Gate 2
is bound to the reviewed commit): attach (``session.attach``, with the app suspended),
send (``session.send``), retry (``run.retry``), Gate 1 (``plan.approve``, bound to the plan
shown) and Gate 2 (``merge.review`` then ``merge.merge``; a comment on a hunk is
``review.comment``, sending them back ``review.request_changes``). A gate is a person's act: each
asks for a confirmation whose default is "no". Permission requests are answered with
``session.permit`` (`lo-orch permit`).

Modules: ``view`` (what is shown: plain functions), ``screens`` (dialogs and the gate
screens), ``app`` (the Textual app and ``run_dashboard``), ``web`` (the app served to a
browser, `lo-orch dashboard --serve`).
"""
