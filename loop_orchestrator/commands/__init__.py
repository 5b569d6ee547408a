"""The application layer: one function per `lo-orch` command, each taking plain typed
arguments and returning a typed result, raising the exception families of ``errors.py``.

``cli/`` parses arguments, calls one of these and renders its result; the dashboard calls
the same functions for its keys. Nothing here prints or asks: a person's confirmation (Gate
2) is the caller's, between ``merge.review`` and ``merge.merge``.

    lo-orch plan      plan.plan          lo-orch merge     merge.review, merge.merge
    lo-orch approve   plan.approve       lo-orch cleanup   merge.cleanup
    lo-orch run       run.run            lo-orch attach    session.attach
    lo-orch retry     run.retry          lo-orch send      session.send
    lo-orch status    status.status      lo-orch permit    session.permit
    lo-orch audit     audit.audit        lo-orch signal    session.signal
    lo-orch doctor    doctor.doctor      lo-orch hook      session.hook
    lo-orch demo      demo.demo          lo-orch comment   review.comment
    lo-orch comments  review.comments    lo-orch request-changes  review.request_changes

``session.pending`` lists the open permission requests `lo-orch permit` answers (the
dashboard shows them). Every command first finds its repository with ``repo.find_repo``.
The modules import the package lazily where a command must start fast (``session.hook``,
``session.signal``).
"""
