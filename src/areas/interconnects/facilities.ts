/**
 * The facilities catalog: colocation facilities where interconnects can be ordered, each with its
 * connection slots (a port on an edge router, reached through a patch panel). The built-in set
 * lists real carrier-neutral facilities; `--cni-facilities <file.json>` replaces it.
 *
 * File format: `{"facilities": [{code, name, address: [lines], site, slots: [{port, device,
 * speed, panel?, id?}]}]}` (a bare array of facilities is accepted too). Slot ids are UUIDs;
 * without an `id` one is derived from facility code, device and port, so it survives restarts.
 */
import { readFileSync } from 'node:fs';
import { z } from 'zod';
import { sha256 } from '../../core/ids.ts';

export const SPEED = /^[1-9]\d*G$/;

const SlotInput = z.object({
  id: z
    .string()
    .regex(/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/)
    .optional(),
  port: z.string().min(1).max(64),
  device: z.string().min(1).max(64),
  speed: z.string().regex(SPEED, 'speed must look like 10G'),
  panel: z.string().min(1).max(100).optional(),
});

const FacilityInput = z.object({
  code: z
    .string()
    .regex(/^[A-Za-z0-9][A-Za-z0-9._-]{0,31}$/, 'code: letters, digits, . _ - (at most 32)'),
  name: z.string().min(1).max(200),
  address: z.array(z.string().min(1).max(200)).min(1).max(8),
  site: z.string().min(1).max(32),
  slots: z.array(SlotInput).max(1000),
});

const CatalogFile = z.union([
  z.object({ facilities: z.array(FacilityInput) }),
  z.array(FacilityInput),
]);

export interface Facility {
  code: string;
  name: string;
  address: string[];
  site: string;
}

export interface Slot {
  id: string;
  facility: Facility;
  port: string;
  device: string;
  speed: string;
  panel: string;
}

export interface Catalog {
  facilities: Facility[];
  slots: Slot[];
  slotById: Map<string, Slot>;
}

/** A UUID (version 5 layout) derived from a name, stable across restarts. */
export function stableUuid(name: string): string {
  const h = sha256(name).slice(0, 32).split('');
  h[12] = '5';
  h[16] = ((parseInt(h[16], 16) & 0x3) | 0x8).toString(16);
  const s = h.join('');
  return `${s.slice(0, 8)}-${s.slice(8, 12)}-${s.slice(12, 16)}-${s.slice(16, 20)}-${s.slice(20, 32)}`;
}

type FacilityInput = z.infer<typeof FacilityInput>;

function build(inputs: FacilityInput[]): Catalog {
  const facilities: Facility[] = [];
  const slots: Slot[] = [];
  const slotById = new Map<string, Slot>();
  const codes = new Set<string>();
  for (const f of inputs) {
    const key = f.code.toLowerCase();
    if (codes.has(key)) throw new Error(`facility ${f.code} is listed twice`);
    codes.add(key);
    const facility: Facility = {
      code: f.code,
      name: f.name,
      address: [...f.address],
      site: f.site,
    };
    facilities.push(facility);
    f.slots.forEach((s, i) => {
      const id = s.id ?? stableUuid(`cni-slot:${f.code}:${s.device}:${s.port}`);
      if (slotById.has(id))
        throw new Error(`slot ${id} (${f.code} ${s.device} ${s.port}) is listed twice`);
      const slot: Slot = {
        id,
        facility,
        port: s.port,
        device: s.device,
        speed: s.speed,
        panel: s.panel ?? `MMR1 PP:${String(i + 1).padStart(4, '0')}`,
      };
      slots.push(slot);
      slotById.set(id, slot);
    });
  }
  return { facilities, slots, slotById };
}

/** Reads a catalog file; throws with the file name and the first problems on bad input. */
export function loadCatalog(path: string | undefined): Catalog {
  if (!path) return build(DEFAULT_FACILITIES);
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(path, 'utf8'));
  } catch (err) {
    throw new Error(`interconnect facilities file ${path}: ${(err as Error).message}`);
  }
  const parsed = CatalogFile.safeParse(raw);
  if (!parsed.success) {
    const issues = parsed.error.issues.slice(0, 5).map((i) => `${i.path.join('.')}: ${i.message}`);
    throw new Error(`interconnect facilities file ${path}: ${issues.join('; ')}`);
  }
  const list = Array.isArray(parsed.data) ? parsed.data : parsed.data.facilities;
  try {
    return build(list);
  } catch (err) {
    throw new Error(`interconnect facilities file ${path}: ${(err as Error).message}`);
  }
}

/**
 * Six slots per facility on two edge routers: four 10G and two 100G ports, patched through the
 * meet-me room. Port names follow the usual router naming (xe- for 10G, et- for 100G).
 */
function standardSlots(site: string): FacilityInput['slots'] {
  const out: FacilityInput['slots'] = [];
  for (const [r, router] of [`edge01.${site}`, `edge02.${site}`].entries()) {
    out.push(
      { device: router, port: 'xe-0/0/0', speed: '10G', panel: `MMR1 PP:01${r}1 ports 1/2` },
      { device: router, port: 'xe-0/0/1', speed: '10G', panel: `MMR1 PP:01${r}1 ports 3/4` },
      { device: router, port: 'et-0/1/0', speed: '100G', panel: `MMR1 PP:01${r}2 ports 1/2` },
    );
  }
  return out;
}

const DEFAULT_FACILITIES: FacilityInput[] = [
  {
    code: 'EQ-SV1',
    name: 'Equinix SV1',
    address: ['11 Great Oaks Blvd', 'San Jose, CA 95119', 'United States'],
    site: 'sjc01',
  },
  {
    code: 'EQ-DC2',
    name: 'Equinix DC2',
    address: ['21715 Filigree Court', 'Ashburn, VA 20147', 'United States'],
    site: 'iad01',
  },
  {
    code: 'EQ-NY5',
    name: 'Equinix NY5',
    address: ['800 Secaucus Road', 'Secaucus, NJ 07094', 'United States'],
    site: 'ewr01',
  },
  {
    code: 'EQ-CH1',
    name: 'Equinix CH1',
    address: ['350 East Cermak Road', 'Chicago, IL 60616', 'United States'],
    site: 'ord01',
  },
  {
    code: 'EQ-LD8',
    name: 'Equinix LD8',
    address: ['6/7 Harbour Exchange Square', 'London E14 9GE', 'United Kingdom'],
    site: 'lhr01',
  },
  {
    code: 'EQ-FR5',
    name: 'Equinix FR5',
    address: ['Kleyerstrasse 90', '60326 Frankfurt am Main', 'Germany'],
    site: 'fra01',
  },
  {
    code: 'EQ-AM5',
    name: 'Equinix AM5',
    address: ['Schepenbergweg 42', '1105 AT Amsterdam', 'Netherlands'],
    site: 'ams01',
  },
  {
    code: 'EQ-SG1',
    name: 'Equinix SG1',
    address: ['20 Ayer Rajah Crescent', 'Singapore 139964', 'Singapore'],
    site: 'sin01',
  },
].map((f) => ({ ...f, slots: standardSlots(f.site) }));
