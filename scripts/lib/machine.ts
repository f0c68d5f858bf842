/**
 * What a report was measured on: cores, memory, OS, runtime and infrastructure versions, the commit
 * and the exact command. Reports from the reliability suite and the benchmarks carry it.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { cpus, release, totalmem, type } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';

export interface MachineDescription {
  readonly cores: number;
  readonly cpuModel: string;
  readonly memoryGiB: number;
  readonly os: string;
  readonly node: string;
  readonly kafka: string;
  readonly kafkajs: string;
  readonly postgres: string;
  readonly commit: string;
  readonly command: string;
  readonly date: string;
}

const root = join(import.meta.dirname, '..', '..');

export async function describeMachine(databaseUrl: string, command: string): Promise<MachineDescription> {
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  const postgres =
    (await client.query<{ v: string }>("SELECT current_setting('server_version') AS v")).rows[0]?.v ?? 'unknown';
  await client.end();
  const pom = readFileSync(join(root, 'infra', 'kafka', 'pom.xml'), 'utf8');
  const kafkajs = JSON.parse(readFileSync(join(root, 'node_modules', 'kafkajs', 'package.json'), 'utf8')) as {
    version: string;
  };
  let commit = 'unknown';
  try {
    commit = execFileSync('git', ['rev-parse', '--short', 'HEAD'], { cwd: root, encoding: 'utf8' }).trim();
  } catch {
    // not a git checkout
  }
  return {
    cores: cpus().length,
    cpuModel: cpus()[0]?.model.trim() ?? 'unknown',
    memoryGiB: Math.round((totalmem() / 2 ** 30) * 10) / 10,
    os: `${type()} ${release()}`,
    node: process.version,
    kafka: `Apache Kafka ${/<kafka\.version>([^<]+)</.exec(pom)?.[1] ?? 'unknown'} (KRaft, single node)`,
    kafkajs: kafkajs.version,
    postgres,
    commit,
    command,
    date: new Date().toISOString(),
  };
}

export function machineMarkdown(machine: MachineDescription): string {
  return [
    `- Machine: ${machine.cores} cores (${machine.cpuModel}), ${machine.memoryGiB} GiB memory, ${machine.os}`,
    `- Node ${machine.node}, kafkajs ${machine.kafkajs}, ${machine.kafka}, PostgreSQL ${machine.postgres}`,
    `- Commit ${machine.commit}, ${machine.date}`,
    `- Command: \`${machine.command}\``,
  ].join('\n');
}
