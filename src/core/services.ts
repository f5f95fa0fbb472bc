/**
 * Per-server registry of what one area offers another at run time (the edge's phase registry,
 * the DNS index, …). An area `provide`s under a name in `mount`; a later area `require`s it. Types
 * come from the providing area's `index.ts` exports, so no area reaches into another's files.
 */
export class Services {
  private readonly items = new Map<string, unknown>();

  provide<T>(name: string, service: T): void {
    if (this.items.has(name)) throw new Error(`service ${name} is provided twice`);
    this.items.set(name, service);
  }

  /** Throws if missing: areas are mounted in `AREAS` order, providers first. */
  require<T>(name: string): T {
    if (!this.items.has(name)) throw new Error(`service ${name} is not provided; check the order of AREAS`);
    return this.items.get(name) as T;
  }

  optional<T>(name: string): T | undefined {
    return this.items.get(name) as T | undefined;
  }
}
