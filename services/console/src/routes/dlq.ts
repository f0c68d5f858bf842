/**
 * Dead letters: each declared topic's DLQ with its depth, a DLQ's newest records (reason code,
 * headers, the payload decoded and masked), and a replay built on the `dlq:replay` command's: a dry
 * run first, always. The dry run's page carries a signed permission for exactly that DLQ and those
 * codes; the real replay is refused without it (or once it expired), so nobody replays what they
 * have not seen counted.
 */
import { createHmac, timingSafeEqual } from 'node:crypto';
import { Type, type Static } from '@sinclair/typebox';
import { WaitTimeoutError } from '@outreach/shared';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { html, query, type Html } from '../domain/html.js';
import { csrfField, isOperator, notice, sendPage } from '../views/layout.js';

const CODE = '^[A-Z0-9_]{0,64}$';
const ListQuery = Type.Object({
  topic: Type.Optional(Type.String({ maxLength: 512 })),
  code: Type.Optional(Type.String({ pattern: CODE })),
});
const ReplayBody = Type.Object({
  _csrf: Type.String({ maxLength: 128 }),
  topic: Type.String({ maxLength: 512 }),
  code: Type.Optional(Type.String({ pattern: CODE })),
  reason: Type.String({ maxLength: 1000 }),
  /** The dry run's permission, for the real replay. */
  permit: Type.Optional(Type.String({ maxLength: 512 })),
});

/** How long a dry run's permission to replay lasts. */
const PERMIT_MS = 15 * 60_000;

function permitFor(key: Buffer, user: string, topic: string, code: string, exp: number): string {
  const mac = createHmac('sha256', key).update(`console-dlq-permit\0${user}\0${topic}\0${code}\0${exp}`).digest();
  return `${exp}.${mac.toString('base64url')}`;
}

function permitValid(key: Buffer, user: string, topic: string, code: string, permit: string | undefined): boolean {
  const [exp = '', mac = ''] = (permit ?? '').split('.');
  if (!/^\d{1,15}$/.test(exp) || Number(exp) < Date.now()) return false;
  const expected = Buffer.from(permitFor(key, user, topic, code, Number(exp)).split('.')[1] ?? '');
  const given = Buffer.from(mac);
  return given.length === expected.length && timingSafeEqual(given, expected);
}

const notConfigured = notice(
  'refused',
  'Dead letters are not configured: set KAFKA_BROKERS (and the console principal’s Kafka settings) for the console (docs/operations.md, 12a).',
);

export default async function dlqRoutes(app: FastifyInstance): Promise<void> {
  /**
   * The DLQs a replay of this console is running on. Two replays of one DLQ join the same consumer
   * group and rebalance each other until both time out (though the records go back once): a second
   * is refused while the first runs. Dry runs read in a group of their own each, and are not held up.
   * Replicas do not see each other's: a replay from another replica (or `dlq:replay`) at the same
   * time still makes both wait; the committed offsets keep either from sending a record back twice.
   */
  const replaying = new Set<string>();
  const unavailable = (request: FastifyRequest, reply: FastifyReply, error: unknown) =>
    sendPage(
      reply,
      request,
      'Dead letters',
      notice('error', html`Kafka did not answer: ${(error as Error).message}`),
      '/dlq',
      502,
    );

  app.get<{ Querystring: Static<typeof ListQuery> }>(
    '/dlq',
    { config: { scope: 'public', console: 'page' }, schema: { querystring: ListQuery } },
    async (request, reply) => {
      const dead = app.deadLetters;
      if (!dead) return sendPage(reply, request, 'Dead letters', notConfigured, '/dlq');
      const topic = request.query.topic ?? '';
      const code = request.query.code ?? '';
      if (topic !== '' && !dead.isDeadLetterTopic(topic))
        return sendPage(
          reply,
          request,
          'Dead letters',
          notice('refused', 'That is no dead-letter topic.'),
          '/dlq',
          400,
        );
      let content: Html;
      try {
        const all = await dead.topics();
        const list = html`<table data-testid="dlq-topics">
          <tr>
            <th>dead-letter topic</th>
            <th>source</th>
            <th>records</th>
          </tr>
          ${all.map(
            (t) =>
              html`<tr data-dlq="${t.dlq}">
                <td><a href="${`/dlq${query({ topic: t.dlq })}`}">${t.dlq}</a></td>
                <td>${t.source}</td>
                <td data-field="depth">${t.depth}</td>
              </tr>`,
          )}
        </table>`;
        if (topic === '') {
          content = html`<p>
              Each topic's dead letters (section 7 of docs/operations.md). Open one to read its records.
            </p>
            ${list}`;
        } else {
          const limit = app.consoleConfig.CONSOLE_PAGE_SIZE;
          const letters = await dead.newest(topic, limit, code);
          const codes = [...new Set(letters.map((l) => l.code))].sort();
          content = html`<p><a href="/dlq">All dead-letter topics</a></p>
            <h2>${topic}</h2>
            <form method="get" action="/dlq">
              <input type="hidden" name="topic" value="${topic}" />
              <label>Reason code <input name="code" value="${code}" maxlength="64" placeholder="any" /></label>
              <button type="submit">Filter</button>
            </form>
            <p>
              The newest ${limit} records of each partition${code ? html`, code <code>${code}</code>` : ''}. Payloads
              are decoded where a schema reads them; addresses, names, subjects and bodies are masked.
              ${codes.length > 0 ? html`Codes here: ${codes.join(', ')}.` : ''}
            </p>
            ${
              letters.length === 0
                ? html`<p data-testid="dlq-empty">No dead letter here.</p>`
                : html`<table data-testid="dlq-records">
                    <tr>
                      <th>when</th>
                      <th>where</th>
                      <th>code</th>
                      <th>headers</th>
                      <th>payload</th>
                    </tr>
                    ${letters.map(
                      (l) =>
                        html`<tr data-offset="${`${l.partition}/${l.offset}`}">
                          <td>${l.timestamp}</td>
                          <td>${l.partition}/${l.offset}</td>
                          <td data-field="code">${l.code}</td>
                          <td>
                            <dl>
                              ${Object.entries(l.headers).map(
                                ([k, v]) =>
                                  html`<dt>${k}</dt>
                                    <dd>${v}</dd>`,
                              )}
                            </dl>
                          </td>
                          <td>
                            <small data-field="decoded-as">${l.decodedAs}, ${l.bytes} bytes</small>
                            <pre data-field="payload">${l.payload}</pre>
                          </td>
                        </tr>`,
                    )}
                  </table>`
            }
            ${isOperator(request.session) ? replayForm(request.session, topic, code) : ''}`;
        }
      } catch (error) {
        return unavailable(request, reply, error);
      }
      return sendPage(reply, request, 'Dead letters', content, '/dlq');
    },
  );

  function replayForm(session: FastifyRequest['session'], topic: string, code: string, permit?: string): Html {
    return html`<h2>Replay</h2>
      <form method="post" action="/dlq/replay" data-testid="${permit ? 'replay-form' : 'dry-run-form'}">
        ${csrfField(session)}
        <input type="hidden" name="topic" value="${topic}" />
        ${
          permit
            ? html`<input type="hidden" name="code" value="${code}" /><input
                  type="hidden"
                  name="permit"
                  value="${permit}"
                />
                <p>
                  Replay ${code ? html`the <code>${code}</code> records` : 'every record'} of ${topic} to its source
                  topic, as the dry run counted them above.
                </p>`
            : html`<label
                  >Only reason code <input name="code" value="${code}" maxlength="64" placeholder="every code"
                /></label>
                <p>A dry run first: it counts what would go back, and changes nothing.</p>`
        }
        <label>Reason <input name="reason" maxlength="1000" required /></label>
        <button type="submit" data-testid="${permit ? 'replay' : 'dry-run'}">${permit ? 'Replay' : 'Dry run'}</button>
      </form>`;
  }

  /** A dry run (no permit), or the real replay (with the dry run's permit for this topic and code). */
  app.post<{ Body: Static<typeof ReplayBody> }>(
    '/dlq/replay',
    { config: { scope: 'public', console: 'action' }, schema: { body: ReplayBody } },
    async (request, reply) => {
      const dead = app.deadLetters;
      if (!dead) return sendPage(reply, request, 'Dead letters', notConfigured, '/dlq', 409);
      const { topic, permit } = request.body;
      const code = request.body.code ?? '';
      const reason = request.body.reason.trim();
      const user = request.session.user ?? '';
      if (!dead.isDeadLetterTopic(topic))
        return sendPage(
          reply,
          request,
          'Dead letters',
          notice('refused', 'That is no dead-letter topic.'),
          '/dlq',
          400,
        );
      if (reason === '') return sendPage(reply, request, 'Dead letters', notice('refused', 'Say why.'), '/dlq', 400);
      const dryRun = permit === undefined || permit === '';
      if (!dryRun && !permitValid(app.consoleKey, user, topic, code, permit)) {
        await app.audit.record({
          actor: user,
          via: request.session.via ?? 'local',
          action: 'dlq.replay',
          target: topic,
          reason,
          outcome: 'refused',
          detail: 'no valid dry run for this topic and code',
        });
        return sendPage(
          reply,
          request,
          'Dead letters',
          notice(
            'refused',
            'Refused: run a dry run of this topic and code first (or again: its permission lasts 15 minutes).',
          ),
          '/dlq',
          409,
        );
      }
      if (!dryRun && replaying.has(topic)) {
        const why = 'a replay of this DLQ is running; see its outcome in the audit, then run a dry run again';
        await app.audit.record({
          actor: user,
          via: request.session.via ?? 'local',
          action: 'dlq.replay',
          target: code ? `${topic} (${code})` : topic,
          reason,
          outcome: 'refused',
          detail: why,
        });
        return sendPage(reply, request, 'Dead letters', notice('refused', `Refused: ${why}.`), '/dlq', 409);
      }
      let result;
      if (!dryRun) replaying.add(topic);
      try {
        result = await dead.replay(topic, { codes: code ? [code] : [], dryRun });
      } catch (error) {
        // A replay that timed out has sent back the batches it got through (each is committed once
        // published; the next run resumes after them): the audit says that, not just that it failed.
        const timedOut = error instanceof WaitTimeoutError;
        const detail =
          timedOut && !dryRun
            ? 'timed out before the end of the DLQ: records up to where it got went back and are committed; a dry run shows what is left'
            : (error as Error).message.slice(0, 500);
        await app.audit.record({
          actor: user,
          via: request.session.via ?? 'local',
          action: dryRun ? 'dlq.replay.dry-run' : 'dlq.replay',
          target: code ? `${topic} (${code})` : topic,
          reason,
          outcome: 'failed',
          detail,
        });
        return timedOut && !dryRun
          ? sendPage(reply, request, 'Dead letters', notice('error', `The replay of ${topic} ${detail}.`), '/dlq', 504)
          : unavailable(request, reply, error);
      } finally {
        if (!dryRun) replaying.delete(topic);
      }
      const counts = `${result.replayed} ${dryRun ? 'would go back' : 'went back'}, ${result.skipped} skipped${code ? ` (code ${code})` : ''}`;
      await app.audit.record({
        actor: user,
        via: request.session.via ?? 'local',
        action: dryRun ? 'dlq.replay.dry-run' : 'dlq.replay',
        target: code ? `${topic} (${code})` : topic,
        reason,
        outcome: 'done',
        detail: counts,
      });
      const byReason = html`<table data-testid="replay-reasons">
        <tr>
          <th>code: reason</th>
          <th>records</th>
        </tr>
        ${Object.entries(result.byReason).map(
          ([k, n]) =>
            html`<tr>
              <td>${k}</td>
              <td>${n}</td>
            </tr>`,
        )}
      </table>`;
      const content = dryRun
        ? html`${notice('ok', html`Dry run of ${topic}: ${counts}. Nothing was published or committed.`)}
            <p data-testid="dry-run-count" data-replayed="${result.replayed}">${result.replayed}</p>
            ${byReason}
            <p>
              The dry run reads the whole DLQ; the replay resumes after what earlier replays took, so it may send back
              fewer.
            </p>
            ${replayForm(
              request.session,
              topic,
              code,
              permitFor(app.consoleKey, user, topic, code, Date.now() + PERMIT_MS),
            )}`
        : html`${notice('ok', html`Replayed ${topic}: ${counts}.`)}
            <p data-testid="replayed-count" data-replayed="${result.replayed}">${result.replayed}</p>
            ${byReason}
            <p><a href="${`/dlq${query({ topic })}`}">Back to ${topic}</a></p>`;
      return sendPage(reply, request, 'Dead letters', content, '/dlq');
    },
  );
}
