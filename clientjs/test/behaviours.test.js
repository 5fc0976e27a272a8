// The client's behaviours (testutil/scenarios.js) in Node, over both
// transports, against real `herald serve` processes. online/offline and
// visibilitychange come from EventTargets standing in for window and
// document; browser/behaviours.test.js runs the same scenarios in Chromium.
import { test } from 'node:test';
import * as herald from '../herald.js';
import { startProbe } from '../testutil/probe.js';
import { scenarios, servers } from '../testutil/scenarios.js';

function nodeEnv(t) {
  return {
    ...servers(t),
    async open(opts) {
      const window = new EventTarget();
      const document = Object.assign(new EventTarget(), { visibilityState: 'visible' });
      const probe = startProbe(herald, { ...opts, window, document });
      t.after(() => probe.close());
      const fire = (target, type) => target.dispatchEvent(new Event(type));
      return {
        record: async () => probe.record(),
        subscribe: async (ch) => probe.subscribe(ch),
        close: async () => probe.close(),
        offline: async () => fire(window, 'offline'),
        online: async () => fire(window, 'online'),
        hide: async () => {
          document.visibilityState = 'hidden';
          fire(document, 'visibilitychange');
        },
        show: async () => {
          document.visibilityState = 'visible';
          fire(document, 'visibilitychange');
        },
      };
    },
  };
}

for (const transport of ['ws', 'sse']) {
  for (const s of scenarios) {
    if (s.where && !s.where({ browser: false, transport })) continue;
    test(`${transport}: ${s.name}`, (t) => s.run(t, { env: nodeEnv(t), transport }));
  }
}
