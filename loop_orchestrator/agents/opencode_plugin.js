// lo-orch's opencode plugin: it reports a managed session's events to lo-orch as the hook
// events Claude Code sends (agents/opencode.py writes it into the run folder with the hook
// launcher's path filled in; docs/agents.md). Outside a session lo-orch runs
// (no LO_ORCH_TASK) it does nothing.
import { spawn } from "node:child_process";

const LAUNCHER = __LAUNCHER__;
// a retry that waits longer than this is reported as a limit (lo-orch parks the task until
// the time opencode retries at); a shorter one only as a notification
const LONG_WAIT_MS = 60000;

function send(event, payload) {
  return new Promise((resolve) => {
    let child;
    try {
      child = spawn(LAUNCHER, [event], { stdio: ["pipe", "ignore", "ignore"] });
    } catch {
      resolve(false);
      return;
    }
    child.on("error", () => resolve(false));
    child.on("close", () => resolve(true));
    child.stdin.on("error", () => {});
    child.stdin.end(JSON.stringify({ hook_event_name: event, ...payload }));
  });
}

// "limit · resets Dec 2, 14:05 (UTC)": the form lo-orch reads a reset time from
function resets(at) {
  const d = new Date(at);
  const month = d.toLocaleString("en-US", { month: "short", timeZone: "UTC" });
  const hh = String(d.getUTCHours()).padStart(2, "0");
  const mm = String(d.getUTCMinutes()).padStart(2, "0");
  return `limit · resets ${month} ${d.getUTCDate()}, ${hh}:${mm} (UTC)`;
}

function failure(error) {
  const status = error?.data?.statusCode;
  if (status === 401 || status === 403) return "authentication_failed";
  if (status === 429) return "rate_limit";
  if (typeof status === "number" && status >= 500) return "server_error";
  return error?.name === "MessageAbortedError" ? "aborted" : "unknown";
}

export const LoOrch = async ({ directory }) => {
  if (!process.env.LO_ORCH_TASK) return {};
  // sessions opencode starts for its own subagents: their prompts are not lo-orch's
  const children = new Set();
  const mine = (id) => typeof id === "string" && !children.has(id);
  const base = (id) => ({ session_id: id, cwd: directory });
  await send("SessionStart", { cwd: directory, source: "startup" });
  return {
    "chat.message": async (input, output) => {
      if (!mine(input.sessionID)) return;
      const text = (output.parts || [])
        .filter((p) => p.type === "text" && !p.synthetic)
        .map((p) => p.text)
        .join("\n");
      await send("UserPromptSubmit", { ...base(input.sessionID), prompt: text });
    },
    "tool.execute.before": async (input, output) => {
      if (!mine(input.sessionID)) return;
      await send("PreToolUse", {
        ...base(input.sessionID),
        tool_name: input.tool,
        tool_input: output.args,
        tool_use_id: input.callID,
      });
    },
    event: async ({ event }) => {
      const p = event.properties || {};
      if (event.type === "session.created" && p.info?.parentID) {
        children.add(p.info.id);
        return;
      }
      if (!mine(p.sessionID)) return;
      if (event.type === "session.idle") {
        // opencode cannot be sent back from here: lo-orch's stall check nudges instead
        await send("Stop", { ...base(p.sessionID), stop_hook_active: true });
      } else if (event.type === "session.status" && p.status?.type === "retry") {
        const message = String(p.status.message || "").slice(0, 150);
        if (p.status.next - Date.now() > LONG_WAIT_MS) {
          await send("StopFailure", {
            ...base(p.sessionID),
            error: "rate_limit",
            last_assistant_message: `${message} (opencode retries by itself: ${resets(p.status.next)})`,
          });
        } else {
          await send("Notification", {
            ...base(p.sessionID),
            notification_type: "api_retry",
            message: `attempt ${p.status.attempt}: ${message}`,
          });
        }
      } else if (event.type === "session.error") {
        const kind = failure(p.error);
        if (kind === "aborted") return;
        await send("StopFailure", {
          ...base(p.sessionID),
          error: kind,
          last_assistant_message: String(p.error?.data?.message || p.error?.name || ""),
        });
      } else if (event.type === "permission.asked") {
        await send("Notification", {
          ...base(p.sessionID),
          notification_type: "permission_prompt",
          message: String(p.permission || p.type || "a permission"),
        });
      }
    },
  };
};
