/**
 * A scenario's own Kafka broker or PostgreSQL server, for the faults that stop one: the shared ones
 * stay up for everyone else on the machine. Without `ownKafka` / `ownPostgres` it hands out the
 * shared addresses and does nothing.
 */
import { existsSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { freePort } from '@outreach/testkit';
import {
  purgeOwnedPostgres,
  startKafka,
  startOwnedPostgres,
  stopKafka,
  stopOwnedPostgres,
  type KafkaInstance,
  type PostgresInstance,
} from '../infra.js';
import type { Scenario } from './scenario.js';

export interface Infra {
  readonly kafkaBrokers: string;
  readonly databaseUrl: string;
}

export class OwnInfra implements Infra {
  private kafkaPid: number | undefined;
  /** Interrupted (Ctrl-C, a crash): no broker or database of the suite's own outlives it. */
  private readonly exitGuard = () => this.killAll();

  private constructor(
    /** Where the own instances keep their data; removed at clean-up. */
    private readonly dir: string,
    readonly kafkaBrokers: string,
    readonly databaseUrl: string,
    private readonly kafka: KafkaInstance | undefined,
    private readonly postgres: PostgresInstance | undefined,
    kafkaPid: number | undefined,
  ) {
    this.kafkaPid = kafkaPid;
    process.on('exit', this.exitGuard);
  }

  static async start(scenario: Scenario, shared: Infra, dir: string): Promise<OwnInfra> {
    let kafka: KafkaInstance | undefined;
    let postgres: PostgresInstance | undefined;
    let { kafkaBrokers, databaseUrl } = shared;
    let kafkaPid: number | undefined;
    if (scenario.ownKafka) {
      kafka = { dir: join(dir, 'kafka'), port: await freePort(), controllerPort: await freePort() };
      ({ brokers: kafkaBrokers, pid: kafkaPid } = await startKafka(kafka));
    }
    if (scenario.ownPostgres) {
      postgres = { dir: join(dir, 'postgres'), port: await freePort() };
      databaseUrl = await startOwnedPostgres(postgres);
    }
    return new OwnInfra(dir, kafkaBrokers, databaseUrl, kafka, postgres, kafkaPid);
  }

  get ownsKafka(): boolean {
    return this.kafka !== undefined;
  }

  get ownsPostgres(): boolean {
    return this.postgres !== undefined;
  }

  /** Stops the own broker, runs `whileDown` and starts the broker again; resolves with what `whileDown` did. */
  async restartKafka<T>(whileDown: () => Promise<T>): Promise<T> {
    if (!this.kafka) throw new Error('this scenario runs on the shared broker: it may not restart it');
    await stopKafka(this.kafka);
    const result = await whileDown();
    this.kafkaPid = (await startKafka(this.kafka)).pid;
    return result;
  }

  /** Stops the own database (fast shutdown), runs `whileDown` and starts it again. */
  async restartPostgres<T>(whileDown: () => Promise<T>): Promise<T> {
    if (!this.postgres) throw new Error('this scenario runs on the shared database: it may not restart it');
    await stopOwnedPostgres(this.postgres);
    const result = await whileDown();
    await startOwnedPostgres(this.postgres);
    return result;
  }

  /** Stops the own instances and removes their data. */
  async cleanUp(): Promise<void> {
    process.off('exit', this.exitGuard);
    if (this.kafka) await stopKafka(this.kafka).catch(() => undefined);
    // Purge, not only stop: as root its data lives outside the directory, in the temp directory (issue #22).
    if (this.postgres) await purgeOwnedPostgres(this.postgres).catch(() => undefined);
    rmSync(this.dir, { recursive: true, force: true });
  }

  /** Synchronous, for `process.on('exit')`. */
  private killAll(): void {
    const postmaster = this.postgres && join(this.postgres.dir, 'data', 'postmaster.pid');
    const postgresPid =
      postmaster && existsSync(postmaster) ? Number(readFileSync(postmaster, 'utf8').split('\n')[0]) : undefined;
    for (const pid of [this.kafkaPid, postgresPid]) {
      try {
        if (pid) process.kill(pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
  }
}
