import { Type, type Static } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import { axisMax, barChart, wilson } from '../domain/charts.js';
import { html, path } from '../domain/html.js';
import { answerNotice, sendPage } from '../views/layout.js';

const ReportQuery = Type.Object({ experimentId: Type.Optional(Type.String({ maxLength: 256 })) });

/** What the console reads of the experiment service's report (GET /v1/experiments/:id/report). */
interface Report {
  readonly experimentId: string;
  readonly status: string;
  readonly weights: Record<string, number>;
  readonly assignedTotal: number;
  readonly variants: ReadonlyArray<{
    variant: string;
    assigned: number;
    exposedCandidates: number;
    exposures: number;
    importedCandidates: number;
    /** Of the exposed candidates, those who replied in the campaign after a send (absent from older services). */
    repliedCandidates?: number;
  }>;
  readonly sampleRatioMismatch: { pValue: number; mismatch: boolean; threshold: number };
  readonly contamination: { candidates: number; withImportedHistory: number; listed: number };
  readonly contaminated: ReadonlyArray<{
    candidateKey: string;
    assignedVariant: string | null;
    exposedVariants: string[];
  }>;
}

type VariantReport = Report['variants'][number];

/**
 * The report's variants with every variant its weights name, in the weights' order: one nobody was
 * assigned to yet has no row of its own in the report, and is shown with zeros rather than missing
 * (a variant that gets nothing is what the page is for). Variants beyond the weights come after.
 */
export function withEveryVariant(report: Pick<Report, 'weights' | 'variants'>): VariantReport[] {
  const reported = new Map(report.variants.map((v) => [v.variant, v]));
  const replies = report.variants.every((v) => typeof v.repliedCandidates === 'number');
  const zero = (variant: string): VariantReport => ({
    variant,
    assigned: 0,
    exposedCandidates: 0,
    exposures: 0,
    importedCandidates: 0,
    ...(replies ? { repliedCandidates: 0 } : {}),
  });
  const named = Object.keys(report.weights ?? {});
  return [
    ...named.map((variant) => reported.get(variant) ?? zero(variant)),
    ...report.variants.filter((v) => !Object.hasOwn(report.weights ?? {}, v.variant)),
  ];
}

const percent = (v: number) => `${(v * 100).toFixed(1)}%`;

export default async function experimentRoutes(app: FastifyInstance): Promise<void> {
  /**
   * An experiment's balance: each variant's share of the (uncontaminated) assignments with its 95%
   * interval against its weight's share, the SRM p-value the experiment service computes, each
   * variant's reply rate with its 95% interval, and the contaminated candidates.
   */
  app.get<{ Querystring: Static<typeof ReportQuery> }>(
    '/experiments',
    { config: { scope: 'public', console: 'page' }, schema: { querystring: ReportQuery } },
    async (request, reply) => {
      const experimentId = request.query.experimentId?.trim() ?? '';
      const form = html`<form method="get" action="/experiments">
        <label>Experiment id <input name="experimentId" value="${experimentId}" maxlength="256" required /></label>
        <button type="submit">Show</button>
      </form>`;
      if (experimentId === '') return sendPage(reply, request, 'Experiments', form, '/experiments');
      const answer = await app.services.read('experiment', path('/v1/experiments', experimentId, 'report'));
      if (answer.status !== 200) {
        const status = answer.status >= 400 && answer.status < 500 ? answer.status : 502;
        return sendPage(reply, request, 'Experiments', html`${form}${answerNotice(answer)}`, '/experiments', status);
      }
      const report = answer.body as Report;
      const variants = withEveryVariant(report);
      const n = variants.reduce((sum, v) => sum + v.assigned, 0);
      const weightSum = Object.values(report.weights).reduce((sum, w) => sum + w, 0);
      const rows = variants.map((v) => {
        const share = n === 0 ? 0 : v.assigned / n;
        const interval = wilson(v.assigned, n);
        const expected = weightSum === 0 ? undefined : (report.weights[v.variant] ?? 0) / weightSum;
        return { ...v, share, interval, expected };
      });
      // Reply rate: replied over exposed candidates (both contaminated-free), with its 95% Wilson interval.
      const replies = variants.every((v) => typeof v.repliedCandidates === 'number')
        ? variants.map((v) => {
            const replied = v.repliedCandidates ?? 0;
            const exposed = v.exposedCandidates;
            return {
              variant: v.variant,
              exposed,
              replied,
              rate: exposed === 0 ? 0 : replied / exposed,
              interval: wilson(replied, exposed),
            };
          })
        : undefined;
      const replyBars = (replies ?? []).map((r) => ({
        label: r.variant,
        value: r.rate,
        low: r.interval.low,
        high: r.interval.high,
      }));
      const srm = report.sampleRatioMismatch;
      const content = html`${form}
        <div class="cards">
          <div class="card">
            <div>Status</div>
            <div class="value" data-testid="experiment-status">${report.status}</div>
          </div>
          <div class="card">
            <div>Assigned</div>
            <div class="value" data-testid="assigned-total">${report.assignedTotal}</div>
          </div>
          <div class="card">
            <div>Sample-ratio mismatch p-value</div>
            <div class="value" data-testid="srm-p">${srm.pValue.toFixed(4)}</div>
            <small data-testid="srm-verdict"
              >${srm.mismatch ? `MISMATCH (below ${srm.threshold})` : `balanced (threshold ${srm.threshold})`}</small
            >
          </div>
          <div class="card">
            <div>Contaminated candidates</div>
            <div class="value" data-testid="contaminated">${report.contamination.candidates}</div>
          </div>
        </div>
        <h2>Variant balance</h2>
        <p>
          Each bar is the variant's share of the uncontaminated assignments, the black line its 95% interval (Wilson),
          the dashed red line the share its weight asks for.
        </p>
        ${barChart(
          rows.map((r) => ({
            label: r.variant,
            value: r.share,
            low: r.interval.low,
            high: r.interval.high,
            ...(r.expected === undefined ? {} : { expected: r.expected }),
          })),
          `Share of assignments per variant in ${report.experimentId}`,
        )}
        <table data-testid="variants">
          <tr>
            <th>variant</th>
            <th>weight share</th>
            <th>assigned</th>
            <th>share</th>
            <th>95% interval</th>
            <th>exposed candidates</th>
            <th>exposures</th>
          </tr>
          ${rows.map(
            (r) =>
              html`<tr data-variant="${r.variant}">
                <td>${r.variant}</td>
                <td>${r.expected === undefined ? '' : percent(r.expected)}</td>
                <td data-field="assigned">${r.assigned}</td>
                <td data-field="share">${percent(r.share)}</td>
                <td data-field="interval">${percent(r.interval.low)} – ${percent(r.interval.high)}</td>
                <td>${r.exposedCandidates}</td>
                <td>${r.exposures}</td>
              </tr>`,
          )}
        </table>
        <h2>Reply rate</h2>
        ${
          replies === undefined
            ? html`<p data-testid="reply-rate">
                Reply rate per variant: not shown. The experiment service's report carries no replied candidates (an
                older version).
              </p>`
            : html`<p>
                  Each bar is the share of the variant's exposed candidates (sent its message, contaminated excluded)
                  who replied in that campaign after the send; the black line is its 95% interval (Wilson). Intervals
                  that overlap widely are no evidence of a difference.
                </p>
                ${barChart(replyBars, `Reply rate per variant in ${report.experimentId}`, { max: axisMax(replyBars) })}
                <table data-testid="reply-rate">
                  <tr>
                    <th>variant</th>
                    <th>exposed candidates</th>
                    <th>replied</th>
                    <th>reply rate</th>
                    <th>95% interval</th>
                  </tr>
                  ${replies.map(
                    (r) =>
                      html`<tr data-variant="${r.variant}">
                        <td>${r.variant}</td>
                        <td data-field="exposed">${r.exposed}</td>
                        <td data-field="replied">${r.replied}</td>
                        <td data-field="rate">${r.exposed === 0 ? '–' : percent(r.rate)}</td>
                        <td data-field="interval">${percent(r.interval.low)} – ${percent(r.interval.high)}</td>
                      </tr>`,
                  )}
                </table>`
        }
        <h2>Contamination</h2>
        ${
          report.contaminated.length === 0
            ? html`<p>No candidate was exposed to a variant other than its own.</p>`
            : html`<table data-testid="contaminated-list">
                <tr>
                  <th>candidate key</th>
                  <th>assigned</th>
                  <th>exposed to</th>
                </tr>
                ${report.contaminated.slice(0, 50).map(
                  (c) =>
                    html`<tr>
                      <td>${c.candidateKey}</td>
                      <td>${c.assignedVariant ?? ''}</td>
                      <td>${c.exposedVariants.join(', ')}</td>
                    </tr>`,
                )}
              </table>`
        }`;
      return sendPage(reply, request, 'Experiments', content, '/experiments');
    },
  );
}
