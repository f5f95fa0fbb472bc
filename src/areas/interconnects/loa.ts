/**
 * The letter of authorization (LOA/CFA) for an interconnect: the document a customer hands to the
 * facility operator to order the cross-connect to the assigned port. One A4 page written with
 * pdfkit's built-in Helvetica, so no font files are needed.
 */
import type { Slot } from './facilities.ts';
import type { StoredInterconnect } from './schemas.ts';

/** How long a letter stays valid after issue; facility operators commonly accept 90 days. */
export const LOA_VALID_DAYS = 90;

export interface LoaInput {
  customer: string;
  interconnect: StoredInterconnect;
  slot: Slot;
  issuedAt: Date;
}

const day = (d: Date) => d.toISOString().slice(0, 10);

/** Optics the customer's side must match, by port speed. */
function opticsFor(speed: string): string {
  const known: Record<string, string> = {
    '1G': '1000BASE-LX',
    '10G': '10GBASE-LR',
    '25G': '25GBASE-LR',
    '40G': '40GBASE-LR4',
    '100G': '100GBASE-LR4',
    '400G': '400GBASE-LR4',
  };
  return known[speed] ?? `${speed} single-mode`;
}

export function loaReference(ic: StoredInterconnect, issuedAt: Date): string {
  return `LOA-${ic.id.slice(0, 8).toUpperCase()}-${day(issuedAt).replaceAll('-', '')}`;
}

export async function renderLoa(input: LoaInput): Promise<Buffer> {
  // Loaded on first use, like every heavy module that only one route needs.
  const { default: PDFDocument } = await import('pdfkit');
  const { customer, interconnect: ic, slot, issuedAt } = input;
  const validUntil = new Date(issuedAt.getTime() + LOA_VALID_DAYS * 86_400_000);
  const reference = loaReference(ic, issuedAt);
  const doc = new PDFDocument({
    size: 'A4',
    margin: 56,
    info: {
      Title: `Letter of Authorization ${reference}`,
      Author: 'Outpost network provisioning',
      Subject: `Cross-connect to ${slot.facility.name}, ${slot.device} ${slot.port}`,
      CreationDate: issuedAt,
      ModDate: issuedAt,
    },
  });
  const chunks: Buffer[] = [];
  doc.on('data', (c: Buffer) => chunks.push(c));
  const done = new Promise<Buffer>((resolve, reject) => {
    doc.on('end', () => resolve(Buffer.concat(chunks)));
    doc.on('error', reject);
  });

  const left = 56;
  const width = doc.page.width - 2 * left;
  doc.font('Helvetica-Bold').fontSize(16).text('LETTER OF AUTHORIZATION', left, 56);
  doc.font('Helvetica').fontSize(10).text('and Connecting Facility Assignment (LOA/CFA)');
  doc.moveDown(0.8);
  doc.text(`Reference: ${reference}`);
  doc.text(`Date of issue: ${day(issuedAt)}`);
  doc.text(`Valid until: ${day(validUntil)} (${LOA_VALID_DAYS} days from the date of issue)`);
  doc.moveDown(0.8);
  doc.font('Helvetica-Bold').text('To the facility operator:');
  doc.font('Helvetica').text(slot.facility.name);
  for (const line of slot.facility.address) doc.text(line);
  doc.moveDown(0.8);
  doc.text(
    `This letter authorizes ${customer} (the "Customer") and its agents to order and install a ` +
      "cross-connect between the Customer's equipment and the port assigned below, in the facility " +
      'named above. The authorization covers this assignment only and expires on the date shown; ' +
      'after that date a new letter must be requested.',
    { width, align: 'justify' },
  );
  doc.moveDown(0.8);

  const rows: [string, string][] = [
    ['Customer', customer],
    ['Facility', `${slot.facility.name} (${slot.facility.code})`],
    ['Facility address', slot.facility.address.join(', ')],
    ['Site', slot.facility.site],
    ['Slot', slot.id],
    ['Device', slot.device],
    ['Port', slot.port],
    ['Patch panel', slot.panel],
    ['Speed', ic.speed],
    ['Optics', `${opticsFor(ic.speed)}, single-mode fiber, LC/UPC connectors`],
    ['Interconnect', ic.name],
    ['Interconnect ID', ic.id],
    ['Type', ic.type],
  ];
  const labelWidth = 120;
  for (const [label, value] of rows) {
    const y = doc.y;
    doc.font('Helvetica-Bold').text(label, left, y, { width: labelWidth });
    const afterLabel = doc.y;
    doc
      .font('Helvetica')
      .text(value, left + labelWidth + 10, y, { width: width - labelWidth - 10 });
    doc.y = Math.max(doc.y, afterLabel) + 3;
  }
  doc.moveDown(0.8);
  doc.text(
    'Please install the cross-connect to the port above and notify the Customer once it is complete. ' +
      'Questions about this assignment: quote the reference above.',
    left,
    doc.y,
    { width },
  );
  doc.moveDown(2);
  doc.font('Helvetica-Bold').text('Authorized signatory');
  doc.font('Helvetica');
  doc.text('Name: Network Provisioning');
  doc.text('Title: Interconnection Operations, Outpost');
  doc.moveDown(1.5);
  doc.text('Signature: ______________________________');
  doc.text(`Date: ${day(issuedAt)}`);
  doc.end();
  return done;
}
