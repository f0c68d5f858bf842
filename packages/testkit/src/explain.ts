import type pg from 'pg';

/** How one table is read: `Seq Scan` (whole), or through an index (a bitmap scan names the indexes it combines). */
export interface PlanScan {
  /** `Seq Scan`, `Index Scan`, `Index Only Scan`, `Bitmap Heap Scan`, ... */
  readonly node: string;
  readonly relation: string;
  readonly indexes: readonly string[];
}

/**
 * How PostgreSQL would read the tables of a query, with sequential scans made as expensive as it
 * allows (`enable_seqscan = off`): a test table is small, and would be scanned whole anyway, which
 * proves nothing. A test then asserts which index serves each table (a whole-table `Seq Scan`, or a
 * full scan of some other index, is what a missing index looks like).
 */
export async function planScans(
  pool: Pick<pg.Pool, 'connect'>,
  sql: string,
  params: readonly unknown[] = [],
): Promise<PlanScan[]> {
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    await client.query('SET LOCAL enable_seqscan = off');
    const { rows } = await client.query<{ 'QUERY PLAN': Array<{ Plan: PlanNode }> }>(`EXPLAIN (FORMAT JSON) ${sql}`, [
      ...params,
    ]);
    const scans: PlanScan[] = [];
    const indexesUnder = (node: PlanNode): string[] => [
      ...(node['Index Name'] ? [node['Index Name']] : []),
      ...(node.Plans ?? []).flatMap(indexesUnder),
    ];
    const visit = (node: PlanNode) => {
      const relation = node['Relation Name'];
      if (relation !== undefined) {
        const bitmap = node['Node Type'] === 'Bitmap Heap Scan';
        scans.push({
          node: node['Node Type'],
          relation,
          indexes: bitmap ? indexesUnder(node) : indexesUnder({ ...node, Plans: [] }),
        });
        if (bitmap) return;
      }
      for (const child of node.Plans ?? []) visit(child);
    };
    for (const plan of rows[0]?.['QUERY PLAN'] ?? []) visit(plan.Plan);
    return scans;
  } finally {
    await client.query('ROLLBACK').catch(() => undefined);
    client.release();
  }
}

interface PlanNode {
  readonly 'Node Type': string;
  readonly 'Relation Name'?: string;
  readonly 'Index Name'?: string;
  readonly Plans?: readonly PlanNode[];
}
