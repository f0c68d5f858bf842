/**
 * Group commit: concurrent callers each submit one item and get their own result, while the items
 * go to the database together, one transaction for many. The first item is flushed at once (on
 * the next turn of the event loop, with whatever else arrived in the same turn); items that arrive
 * while a flush is in flight wait for it and go in the next one. So a lone caller pays no delay, and
 * under load the round trips per item fall with the concurrency.
 *
 * `flush` receives the items in submission order and returns one result per item, in that order.
 * If it throws, every item of that flush is rejected with the error.
 */
export class GroupCommit<I, O> {
  private queue: Array<{ item: I; resolve: (value: O) => void; reject: (error: unknown) => void }> = [];
  private flushing = false;
  private scheduled = false;

  constructor(
    private readonly flush: (items: readonly I[]) => Promise<readonly O[]>,
    private readonly maxItems = 500,
  ) {}

  submit(item: I): Promise<O> {
    return new Promise<O>((resolve, reject) => {
      this.queue.push({ item, resolve, reject });
      this.schedule();
    });
  }

  private schedule(): void {
    if (this.flushing || this.scheduled) return;
    this.scheduled = true;
    setImmediate(() => {
      this.scheduled = false;
      void this.run();
    });
  }

  private async run(): Promise<void> {
    if (this.flushing || this.queue.length === 0) return;
    this.flushing = true;
    const batch = this.queue.splice(0, this.maxItems);
    try {
      const results = await this.flush(batch.map((b) => b.item));
      if (results.length !== batch.length) {
        throw new Error(`group commit: ${results.length} results for ${batch.length} items`);
      }
      batch.forEach((b, i) => b.resolve(results[i] as O));
    } catch (error) {
      for (const b of batch) b.reject(error);
    } finally {
      this.flushing = false;
      if (this.queue.length > 0) this.schedule();
    }
  }
}
