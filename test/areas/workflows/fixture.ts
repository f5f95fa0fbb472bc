/**
 * The workflow script the engine tests deploy: one class per behaviour, and a fetch handler that
 * drives the workflow bindings (`/<op>/<workflow>/<id>`), so tests reach the binding through a real
 * request handler. Steps report side effects to the test's counter (`params.counter`).
 */

export const WORKFLOWS = {
  retry: 'Retry',
  nonretry: 'NonRetry',
  cleanup: 'Cleanup',
  sleeper: 'Sleeper',
  waiter: 'Waiter',
  gated: 'Gated',
  timeout: 'Timeout',
  limited: 'Limited',
  badoutput: 'BadOutput',
  parallel: 'Parallel',
  spawner: 'Spawner',
} as const;

export const SCRIPT = String.raw`
import { WorkflowEntrypoint } from 'cloudflare:workers';
import { NonRetryableError } from 'cloudflare:workflows';

const hit = async (p, key) => (await fetch(p.counter + '/hit/' + encodeURIComponent(key), { method: 'POST' })).json();

export class Retry extends WorkflowEntrypoint {
  async run(event, step) {
    const p = event.payload;
    return step.do('flaky', { retries: { limit: p.limit, delay: p.delay, backoff: p.backoff } }, async () => {
      const { n } = await hit(p, event.instanceId + ':flaky');
      if (n <= p.failures) throw new Error('boom ' + n);
      return 'ok after ' + n;
    });
  }
}

export class NonRetry extends WorkflowEntrypoint {
  async run(event, step) {
    const p = event.payload;
    await step.do('fatal', async () => {
      await hit(p, event.instanceId + ':fatal');
      throw new NonRetryableError('do not retry');
    });
    return 'unreachable';
  }
}

export class Cleanup extends WorkflowEntrypoint {
  async run(event, step) {
    const p = event.payload;
    let failure;
    try {
      await step.do('charge', { retries: { limit: 1, delay: '1 second', backoff: 'constant' } }, async () => {
        await hit(p, event.instanceId + ':charge');
        throw new Error('card declined');
      });
    } catch (e) {
      failure = e.name + ': ' + e.message;
    }
    await step.sleep('settle', '1 minute');
    const undone = await step.do('refund', async () => {
      await hit(p, event.instanceId + ':refund');
      return 'refunded';
    });
    return { failure, undone };
  }
}

export class Sleeper extends WorkflowEntrypoint {
  async run(event, step) {
    const p = event.payload;
    await step.do('before', async () => (await hit(p, event.instanceId + ':before')).n);
    if (p.until !== undefined) await step.sleepUntil('nap', new Date(p.until));
    else await step.sleep('nap', p.duration);
    await step.do('after', async () => (await hit(p, event.instanceId + ':after')).n);
    return 'rested';
  }
}

export class Waiter extends WorkflowEntrypoint {
  async run(event, step) {
    const p = event.payload;
    if (p.sleepFirst) await step.sleep('first', p.sleepFirst);
    try {
      const ev = await step.waitForEvent('approval', p.timeout ? { type: 'approved', timeout: p.timeout } : { type: 'approved' });
      return { approved: ev.payload, type: ev.type, ts: ev.timestamp instanceof Date };
    } catch (e) {
      if (p.catchTimeout) return { timedOut: e.name + ': ' + e.message };
      throw e;
    }
  }
}

export class Gated extends WorkflowEntrypoint {
  async run(event, step) {
    const p = event.payload;
    const a = await step.do('gate', async () => (await hit(p, event.instanceId + ':gate')).n);
    if (p.sleep) await step.sleep('nap', p.sleep);
    if (p.fail) throw new Error('failed on purpose');
    const b = await step.do('after', async () => (await hit(p, event.instanceId + ':after')).n);
    return { a, b };
  }
}

export class Timeout extends WorkflowEntrypoint {
  async run(event, step) {
    return step.do('slow', { retries: { limit: 0, delay: 0 }, timeout: 50 }, async () => {
      await new Promise((r) => setTimeout(r, 1500));
      return 'late';
    });
  }
}

export class Limited extends WorkflowEntrypoint {
  async run(event, step) {
    for (let i = 0; i < 5; i++) await step.do('s' + i, async () => i);
    return 'done';
  }
}

export class BadOutput extends WorkflowEntrypoint {
  async run(event, step) {
    try {
      await step.do('fn', async () => ({ f: () => 1 }));
      return 'no error';
    } catch (e) {
      return e.name + ': ' + e.message;
    }
  }
}

export class Parallel extends WorkflowEntrypoint {
  async run(event, step) {
    const p = event.payload;
    const values = await Promise.all([1, 2, 3].map((i) => step.do('part', async () => (await hit(p, event.instanceId + ':part' + i)).n * i)));
    await step.sleep('rest', '5 seconds');
    const more = await step.do('sum', async () => values.reduce((a, b) => a + b, 0));
    return { values, more, types: { map: new Map([[1, 'a']]) instanceof Map, big: 10n } };
  }
}

export class Spawner extends WorkflowEntrypoint {
  async run(event, step) {
    const child = await step.do('spawn', async () => (await this.env.WF_SLEEPER.create({ id: event.instanceId + '-child', params: { counter: event.payload.counter, duration: 1000 } })).id);
    return child;
  }
}

const WEIRD = () => {
  const cycle = {};
  cycle.self = cycle;
  return { fn: () => 1, sym: Symbol('s'), cycle, big: 'x'.repeat(1100000) };
};

export default {
  async fetch(req, env) {
    const url = new URL(req.url);
    const [, op, wf, id] = url.pathname.split('/');
    const body = req.method === 'POST' ? await req.json().catch(() => ({})) : {};
    const binding = env['WF_' + (wf || '').replace(/[^A-Za-z0-9]/g, '_').toUpperCase()];
    try {
      switch (op) {
        case 'create': {
          const i = await binding.create(body);
          return Response.json({ id: i.id });
        }
        case 'create-weird': {
          const i = await binding.create({ params: { v: WEIRD()[body.kind] } });
          return Response.json({ id: i.id });
        }
        case 'create-batch': {
          const list = await binding.createBatch(body);
          return Response.json({ ids: list.map((i) => i.id) });
        }
        case 'status':
          return Response.json(await (await binding.get(id)).status());
        case 'pause':
        case 'resume':
        case 'terminate':
        case 'restart':
          await (await binding.get(id))[op]();
          return Response.json({ ok: true });
        case 'event':
          await (await binding.get(id)).sendEvent(body);
          return Response.json({ ok: true });
        case 'env':
          return Response.json({ keys: Object.keys(env).sort(), hasCreate: typeof binding.create });
      }
      return new Response('no such operation', { status: 404 });
    } catch (e) {
      return Response.json({ error: { name: e.name, message: e.message } }, { status: 400 });
    }
  },
};
`;
