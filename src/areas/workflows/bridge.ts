/**
 * The engine's end of the service binding every script gets: step calls from an attempt, and the
 * workflow binding's operations (`create`, `createBatch`, `get`, and the instance handle's
 * methods). Binding failures answer `{error: {name, message}}` with the platform's
 * `(code) message` text, which the wrapper throws in the script.
 */
import { ApiError } from '../../core/errors.ts';
import type { AttemptRpc, BindingRpc, WorkflowsBridge } from '../workers/index.ts';
import type { WorkflowEngine } from './engine.ts';
import { statusView } from './views.ts';

type Msg = AttemptRpc | BindingRpc;

export function createBridge(
  engine: WorkflowEngine,
  log: { error(obj: unknown, msg: string): void },
): WorkflowsBridge {
  async function dispatch(accountId: string, msg: Msg): Promise<unknown> {
    switch (msg.op) {
      case 'step':
      case 'sleep':
      case 'wait':
        return engine.onAttemptRpc(msg);
      case 'create': {
        const [c] = await engine.create(
          accountId,
          msg.workflow,
          [{ id: msg.id, params: msg.params, retention: msg.retention }],
          'binding',
          {
            skipExisting: false,
          },
        );
        return { id: c.instance.id };
      }
      case 'createBatch': {
        if (!Array.isArray(msg.items)) throw new TypeError('createBatch: items must be an array');
        const created = await engine.create(accountId, msg.workflow, msg.items, 'binding', {
          skipExisting: true,
        });
        return { ids: created.map((c) => c.instance.id) };
      }
      case 'get': {
        const inst = await engine.requireInstance(accountId, msg.workflow, String(msg.id));
        return { id: inst.id };
      }
      case 'status':
        return statusView(
          await engine.requireInstance(accountId, msg.workflow, String(msg.id)),
          true,
        );
      case 'pause':
        await engine.pause(accountId, msg.workflow, String(msg.id));
        return {};
      case 'resume':
        await engine.resume(accountId, msg.workflow, String(msg.id));
        return {};
      case 'terminate':
        await engine.terminate(accountId, msg.workflow, String(msg.id), 'binding');
        return {};
      case 'restart':
        await engine.restart(accountId, msg.workflow, String(msg.id), msg.from);
        return {};
      case 'sendEvent':
        await engine.sendEvent(accountId, msg.workflow, String(msg.id), msg.type, msg.payload);
        return {};
      default:
        throw new TypeError(`unknown operation ${(msg as { op?: unknown }).op as string}`);
    }
  }

  return {
    async handle(accountId, _scriptName, req) {
      let msg: Msg;
      try {
        msg = (await req.json()) as Msg;
      } catch {
        return Response.json({
          error: { name: 'TypeError', message: 'malformed request to the workflows engine' },
        });
      }
      try {
        return Response.json((await dispatch(accountId, msg)) ?? {});
      } catch (err) {
        if (err instanceof ApiError)
          return Response.json({
            error: { name: 'Error', message: err.errors.map((e) => e.message).join('; ') },
          });
        if (err instanceof TypeError)
          return Response.json({ error: { name: 'TypeError', message: err.message } });
        log.error({ err, op: msg.op }, 'workflows engine call failed');
        return Response.json({
          error: {
            name: 'Error',
            message: `internal error in the workflows engine: ${(err as Error).message}`,
          },
        });
      }
    },
  };
}
