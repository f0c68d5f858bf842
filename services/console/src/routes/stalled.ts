import { Type, type Static } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import { html, path, query, type Html } from '../domain/html.js';
import { maskPersonal } from '../domain/mask.js';
import { answerNotice, notice, sendPage } from '../views/layout.js';

const REASONS = ['no_next_step', 'next_step_overdue'] as const;

const ListQuery = Type.Object({
  campaignId: Type.Optional(Type.String({ maxLength: 256 })),
  reason: Type.Optional(Type.Union([Type.Literal(''), ...REASONS.map((r) => Type.Literal(r))])),
  /** Only conversations flagged at least this many minutes ago. */
  minAgeMinutes: Type.Optional(Type.Union([Type.Literal(''), Type.String({ pattern: '^[0-9]{1,7}$' })])),
  after: Type.Optional(Type.String({ maxLength: 8192 })),
});
const ConversationQuery = Type.Object({ id: Type.String({ minLength: 1, maxLength: 2048 }) });

interface Stalled {
  readonly conversationId: string;
  readonly campaignId: string;
  readonly candidateKey: string;
  readonly stalledReason: string;
  readonly stalledSince: string | null;
  readonly flaggedAt: string | null;
  readonly obligationKind: string | null;
  readonly pendingStepId: string | null;
  readonly dueAt: string | null;
  readonly lastEventType: string | null;
  readonly lastEventAt: string | null;
  readonly stallCount: number;
}

interface Graces {
  readonly inboundMs: number;
  readonly outboundMs: number;
  readonly overdueMs: number;
  readonly replyWindowMs?: number | null;
  readonly source: 'campaign' | 'default';
}

const minutes = (ms: number) =>
  ms % 3_600_000 === 0 ? `${ms / 3_600_000} h` : ms % 60_000 === 0 ? `${ms / 60_000} min` : `${ms / 1000} s`;

function age(since: string | null, now: number): string {
  if (since === null) return '';
  const ms = Math.max(0, now - Date.parse(since));
  if (ms < 60_000) return `${Math.floor(ms / 1000)} s`;
  if (ms < 3_600_000) return `${Math.floor(ms / 60_000)} min`;
  if (ms < 86_400_000) return `${Math.floor(ms / 3_600_000)} h`;
  return `${Math.floor(ms / 86_400_000)} d`;
}

/** Which of the campaign's graces decided this stall. */
function appliedGrace(conversation: Stalled, graces: Graces): string {
  if (conversation.stalledReason === 'next_step_overdue') return `overdue: ${minutes(graces.overdueMs)} past dueAt`;
  if (conversation.obligationKind === 'inbound') return `inbound: ${minutes(graces.inboundMs)} to answer a reply`;
  if (conversation.obligationKind === 'outbound')
    return `outbound: ${minutes(graces.outboundMs)} to schedule a next step`;
  return '';
}

export default async function stalledRoutes(app: FastifyInstance): Promise<void> {
  /**
   * Stalled conversations (the liveness's list, oldest flag first), by campaign and reason. The age
   * filter keeps those flagged at least that long ago: the list is in flag order, so they are its
   * head, and paging stops where they end.
   */
  app.get<{ Querystring: Static<typeof ListQuery> }>(
    '/stalled',
    { config: { scope: 'public', console: 'page' }, schema: { querystring: ListQuery } },
    async (request, reply) => {
      const campaignId = request.query.campaignId?.trim() ?? '';
      const reason = request.query.reason ?? '';
      const minAge = request.query.minAgeMinutes ? Number(request.query.minAgeMinutes) : 0;
      const limit = app.consoleConfig.CONSOLE_PAGE_SIZE;
      const answer = await app.services.read(
        'liveness',
        `/v1/conversations/stalled${query({ campaignId, reason, limit, after: request.query.after })}`,
      );
      const filters = html`<form method="get" action="/stalled" data-testid="stalled-filters">
        <label>Campaign <input name="campaignId" value="${campaignId}" maxlength="256" /></label>
        <label
          >Reason
          <select name="reason">
            <option value="">any</option>
            ${REASONS.map((r) => html`<option value="${r}" ${r === reason ? html`selected` : ''}>${r}</option>`)}
          </select></label
        >
        <label
          >Flagged at least
          <input name="minAgeMinutes" value="${minAge || ''}" inputmode="numeric" pattern="[0-9]*" size="6" /> minutes
          ago</label
        >
        <button type="submit">Filter</button>
      </form>`;
      if (answer.status !== 200) {
        const status = answer.status >= 400 && answer.status < 500 ? answer.status : 502;
        return sendPage(
          reply,
          request,
          'Stalled conversations',
          html`${filters}${answerNotice(answer)}`,
          '/stalled',
          status,
        );
      }
      const body = answer.body as { conversations: Stalled[]; next: string | null };
      const now = Date.now();
      const cutoff = now - minAge * 60_000;
      const old = body.conversations.filter((c) => c.flaggedAt !== null && Date.parse(c.flaggedAt) <= cutoff);
      // In flag order: once one is too young, so is every later one.
      const next = old.length === body.conversations.length ? body.next : null;
      const rows: Html =
        old.length === 0
          ? html`<p data-testid="stalled-empty">No stalled conversation matches.</p>`
          : html`<table data-testid="stalled">
              <tr>
                <th>conversation</th>
                <th>campaign</th>
                <th>reason</th>
                <th>stalled for</th>
                <th>flagged</th>
                <th>last event</th>
                <th>pending step</th>
                <th>times stalled</th>
              </tr>
              ${old.map(
                (c) =>
                  html`<tr data-conversation="${c.conversationId}">
                    <td>
                      <a href="${`/stalled/conversation${query({ id: c.conversationId })}`}">${c.conversationId}</a>
                    </td>
                    <td>${c.campaignId}</td>
                    <td data-field="reason">${c.stalledReason}</td>
                    <td>${age(c.stalledSince, now)}</td>
                    <td>${c.flaggedAt ?? ''}</td>
                    <td>${c.lastEventType ?? ''} ${c.lastEventAt ?? ''}</td>
                    <td>${c.pendingStepId ?? ''} ${c.dueAt ? html`(due ${c.dueAt})` : ''}</td>
                    <td>${c.stallCount}</td>
                  </tr>`,
              )}
            </table>`;
      const more = next
        ? html`<p>
            <a
              data-testid="next-page"
              href="${`/stalled${query({ campaignId, reason, minAgeMinutes: minAge || undefined, after: next })}`}"
              >More</a
            >
          </p>`
        : '';
      const content = html`<p>
          Conversations the liveness flagged: a reply nobody answered, or a next step that is overdue
          (docs/operations.md, section 6).
        </p>
        ${filters}${rows}${more}`;
      return sendPage(reply, request, 'Stalled conversations', content, '/stalled');
    },
  );

  /** One conversation: what the liveness knows of it, its events in order, and the graces that applied. */
  app.get<{ Querystring: Static<typeof ConversationQuery> }>(
    '/stalled/conversation',
    { config: { scope: 'public', console: 'page' }, schema: { querystring: ConversationQuery } },
    async (request, reply) => {
      const answer = await app.services.read('liveness', path('/v1/conversations', request.query.id));
      if (answer.status !== 200) {
        const status = answer.status >= 400 && answer.status < 500 ? answer.status : 502;
        return sendPage(reply, request, 'Conversation', answerNotice(answer), '/stalled', status);
      }
      const conversation = answer.body as Stalled & {
        status: string;
        obligationSince: string | null;
        closedReason: string | null;
        timeline: Array<{ eventId: string; type: string; at: string; payload: unknown }>;
      };
      const gracesAnswer = await app.services.read(
        'liveness',
        path('/v1/campaigns', conversation.campaignId, 'graces'),
      );
      const graces = gracesAnswer.status === 200 ? (gracesAnswer.body as Graces) : undefined;
      const fields: Array<[string, unknown]> = [
        ['conversation', conversation.conversationId],
        ['campaign', conversation.campaignId],
        ['candidate key', conversation.candidateKey],
        ['status', conversation.status],
        ['stalled', conversation.stalledReason ?? 'no'],
        ['stalled since', conversation.stalledSince],
        ['flagged at', conversation.flaggedAt],
        ['obligation', conversation.obligationKind],
        ['obligation since', conversation.obligationSince],
        ['pending step', conversation.pendingStepId],
        ['due at', conversation.dueAt],
        ['closed', conversation.closedReason],
      ];
      const content = html`<p><a href="/stalled">All stalled conversations</a></p>
        <table data-testid="conversation">
          ${fields.map(
            ([k, v]) =>
              html`<tr>
                <th>${k}</th>
                <td>${v === null || v === undefined ? '' : String(v)}</td>
              </tr>`,
          )}
        </table>
        <h2>Graces</h2>
        ${
          graces
            ? html`<table data-testid="graces">
                  <tr>
                    <th>inbound (answer a reply)</th>
                    <td data-field="inbound">${minutes(graces.inboundMs)}</td>
                  </tr>
                  <tr>
                    <th>outbound (schedule a next step)</th>
                    <td data-field="outbound">${minutes(graces.outboundMs)}</td>
                  </tr>
                  <tr>
                    <th>overdue (past a step's due time)</th>
                    <td data-field="overdue">${minutes(graces.overdueMs)}</td>
                  </tr>
                  <tr>
                    <th>from</th>
                    <td data-field="source">
                      ${graces.source === 'campaign' ? "the campaign's own" : "the service's defaults"}
                    </td>
                  </tr>
                </table>
                ${
                  conversation.stalledReason
                    ? html`<p data-testid="applied-grace">Applied: ${appliedGrace(conversation, graces)}</p>`
                    : ''
                }`
            : answerNotice(gracesAnswer)
        }
        <h2>Timeline</h2>
        ${
          conversation.timeline.length === 0
            ? notice('ok', 'No event stored.')
            : html`<table data-testid="timeline">
                <tr>
                  <th>at</th>
                  <th>event</th>
                  <th>payload (personal fields masked)</th>
                </tr>
                ${conversation.timeline.map(
                  (e) =>
                    html`<tr data-event="${e.eventId}">
                      <td>${e.at}</td>
                      <td data-field="type">${e.type}</td>
                      <td><code>${JSON.stringify(maskPersonal(e.payload))}</code></td>
                    </tr>`,
                )}
              </table>`
        }`;
      return sendPage(reply, request, 'Conversation', content, '/stalled');
    },
  );
}
