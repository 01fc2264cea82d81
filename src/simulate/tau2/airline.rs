//! The τ² airline domain: typed database and every tool of τ²'s `AirlineTools`, with the same
//! checks, state changes, return values and error messages.

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use super::pycall::{self, key, Ret, ToolRes, Validator};
use super::pyjson::{py_repr, py_str};
use super::{en, get_mut, int, s, Table, ToolDef};

/// A person's name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Name {
    pub first_name: String,
    pub last_name: String,
}

/// A postal address.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Address {
    pub address1: String,
    #[serde(default)]
    pub address2: Option<String>,
    pub city: String,
    pub country: String,
    pub state: String,
    pub zip: String,
}

/// A payment on a reservation (negative for refunds).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Payment {
    pub payment_id: String,
    pub amount: i64,
}

/// A saved payment method.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "source")]
pub(crate) enum PaymentMethod {
    #[serde(rename = "credit_card")]
    CreditCard {
        id: String,
        brand: String,
        last_four: String,
    },
    #[serde(rename = "gift_card")]
    GiftCard { id: String, amount: f64 },
    #[serde(rename = "certificate")]
    Certificate { id: String, amount: f64 },
}

/// A passenger.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Passenger {
    pub first_name: String,
    pub last_name: String,
    pub dob: String,
}

/// The state of one flight on one date.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status")]
pub(crate) enum FlightDateStatus {
    #[serde(rename = "available")]
    Available {
        available_seats: IndexMap<String, i64>,
        prices: IndexMap<String, i64>,
    },
    #[serde(rename = "landed")]
    Landed {
        actual_departure_time_est: String,
        actual_arrival_time_est: String,
    },
    #[serde(rename = "cancelled")]
    Cancelled {},
    #[serde(rename = "delayed")]
    Delayed {
        estimated_departure_time_est: String,
        estimated_arrival_time_est: String,
    },
    #[serde(rename = "flying")]
    Flying {
        actual_departure_time_est: String,
        estimated_arrival_time_est: String,
    },
    #[serde(rename = "on time")]
    OnTime {
        estimated_departure_time_est: String,
        estimated_arrival_time_est: String,
    },
}

impl FlightDateStatus {
    fn status(&self) -> &'static str {
        match self {
            FlightDateStatus::Available { .. } => "available",
            FlightDateStatus::Landed { .. } => "landed",
            FlightDateStatus::Cancelled {} => "cancelled",
            FlightDateStatus::Delayed { .. } => "delayed",
            FlightDateStatus::Flying { .. } => "flying",
            FlightDateStatus::OnTime { .. } => "on time",
        }
    }
}

/// A scheduled flight and its per-date states.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Flight {
    pub flight_number: String,
    pub origin: String,
    pub destination: String,
    pub scheduled_departure_time_est: String,
    pub scheduled_arrival_time_est: String,
    pub dates: IndexMap<String, FlightDateStatus>,
}

/// A flight segment of a reservation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ReservationFlight {
    pub flight_number: String,
    pub origin: String,
    pub destination: String,
    pub date: String,
    pub price: i64,
}

/// A user.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct User {
    pub user_id: String,
    pub name: Name,
    pub address: Address,
    pub email: String,
    pub dob: String,
    pub payment_methods: IndexMap<String, PaymentMethod>,
    pub saved_passengers: Vec<Passenger>,
    pub membership: String,
    pub reservations: Vec<String>,
}

/// A reservation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Reservation {
    pub reservation_id: String,
    pub user_id: String,
    pub origin: String,
    pub destination: String,
    pub flight_type: String,
    pub cabin: String,
    pub flights: Vec<ReservationFlight>,
    pub passengers: Vec<Passenger>,
    pub payment_history: Vec<Payment>,
    pub created_at: String,
    pub total_baggages: i64,
    pub nonfree_baggages: i64,
    pub insurance: String,
    #[serde(default)]
    pub status: Option<String>,
}

/// The airline database.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FlightDb {
    #[serde(with = "super::table")]
    pub flights: Table<Flight>,
    #[serde(with = "super::table")]
    pub users: Table<User>,
    #[serde(with = "super::table")]
    pub reservations: Table<Reservation>,
}

impl PartialEq for FlightDb {
    fn eq(&self, other: &Self) -> bool {
        super::table_eq(&self.flights, &other.flights)
            && super::table_eq(&self.users, &other.users)
            && super::table_eq(&self.reservations, &other.reservations)
    }
}

const CABINS: [&str; 3] = ["business", "economy", "basic_economy"];
const PAYMENT_ID: &str = "The payment id stored in user profile, such as 'credit_card_7815826', 'gift_card_7815826', 'certificate_7815826'.";
const RESERVATION_ID: &str = "The reservation ID, such as 'ZFA04Y'.";

fn flight_info_schema(desc: &str) -> Value {
    json!({
        "type": "array",
        "description": desc,
        "items": {
            "type": "object",
            "properties": {
                "flight_number": {"type": "string", "description": "Flight number, such as 'HAT001'."},
                "date": {"type": "string", "description": "The date for the flight in the format 'YYYY-MM-DD', such as '2024-05-01'."}
            },
            "required": ["flight_number", "date"]
        }
    })
}

fn passengers_schema() -> Value {
    json!({
        "type": "array",
        "description": "An array of objects containing details about each passenger.",
        "items": {
            "type": "object",
            "properties": {
                "first_name": {"type": "string", "description": "Passenger's first name"},
                "last_name": {"type": "string", "description": "Passenger's last name"},
                "dob": {"type": "string", "description": "Date of birth in YYYY-MM-DD format"}
            },
            "required": ["first_name", "last_name", "dob"]
        }
    })
}

/// The tools in τ²'s definition order.
pub(crate) fn tool_defs() -> Vec<ToolDef> {
    vec![
        ToolDef::new("book_reservation", "Book a reservation.")
            .req("user_id", s("The ID of the user to book the reservation such as 'sara_doe_496'."))
            .req("origin", s("The IATA code for the origin city such as 'SFO'."))
            .req("destination", s("The IATA code for the destination city such as 'JFK'."))
            .req("flight_type", en("The type of flight such as 'one_way' or 'round_trip'.", &["round_trip", "one_way"]))
            .req("cabin", en("The cabin class such as 'basic_economy', 'economy', or 'business'.", &CABINS))
            .req("flights", flight_info_schema("An array of objects containing details about each piece of flight."))
            .req("passengers", passengers_schema())
            .req("payment_methods", json!({
                "type": "array",
                "description": "An array of objects containing details about each payment method.",
                "items": {
                    "type": "object",
                    "properties": {
                        "payment_id": {"type": "string", "description": "Unique identifier for the payment"},
                        "amount": {"type": "integer", "description": "Payment amount in dollars"}
                    },
                    "required": ["payment_id", "amount"]
                }
            }))
            .req("total_baggages", int("The total number of baggage items to book the reservation."))
            .req("nonfree_baggages", int("The number of non-free baggage items to book the reservation."))
            .req("insurance", en("Whether the reservation has insurance.", &["yes", "no"])),
        ToolDef::new("calculate", "Calculate the result of a mathematical expression.")
            .req("expression", s("The mathematical expression to calculate, such as '2 + 2'. The expression can contain numbers, operators (+, -, *, /), parentheses, and spaces.")),
        ToolDef::new("cancel_reservation", "Cancel the whole reservation.")
            .req("reservation_id", s(RESERVATION_ID)),
        ToolDef::new("get_reservation_details", "Get the details of a reservation.")
            .req("reservation_id", s("The reservation ID, such as '8JX2WO'.")),
        ToolDef::new("get_user_details", "Get the details of a user, including their reservations.")
            .req("user_id", s("The user ID, such as 'sara_doe_496'.")),
        ToolDef::new("list_all_airports", "Returns a list of all available airports."),
        ToolDef::new("search_direct_flight", "Search for direct flights between two cities on a specific date.")
            .req("origin", s("The origin city airport in three letters, such as 'JFK'."))
            .req("destination", s("The destination city airport in three letters, such as 'LAX'."))
            .req("date", s("The date of the flight in the format 'YYYY-MM-DD', such as '2024-01-01'.")),
        ToolDef::new("search_onestop_flight", "Search for one-stop flights between two cities on a specific date.")
            .req("origin", s("The origin city airport in three letters, such as 'JFK'."))
            .req("destination", s("The destination city airport in three letters, such as 'LAX'."))
            .req("date", s("The date of the flight in the format 'YYYY-MM-DD', such as '2024-05-01'.")),
        ToolDef::new("send_certificate", "Send a certificate to a user. Be careful!")
            .req("user_id", s("The ID of the user to book the reservation, such as 'sara_doe_496'."))
            .req("amount", int("The amount of the certificate to send.")),
        ToolDef::new(
            "transfer_to_human_agents",
            "Transfer the user to a human agent, with a summary of the user's issue. Only transfer if the user explicitly asks for a human agent, or given the policy and the available tools, you cannot solve the user's issue.",
        )
        .req("summary", s("A summary of the user's issue.")),
        ToolDef::new("update_reservation_baggages", "Update the baggage information of a reservation.")
            .req("reservation_id", s(RESERVATION_ID))
            .req("total_baggages", int("The updated total number of baggage items included in the reservation."))
            .req("nonfree_baggages", int("The updated number of non-free baggage items included in the reservation."))
            .req("payment_id", s(PAYMENT_ID)),
        ToolDef::new("update_reservation_flights", "Update the flight information of a reservation.")
            .req("reservation_id", s(RESERVATION_ID))
            .req("cabin", en("The cabin class of the reservation", &CABINS))
            .req("flights", flight_info_schema("An array of objects containing details about each piece of flight in the ENTIRE new reservation. Even if the a flight segment is not changed, it should still be included in the array."))
            .req("payment_id", s(PAYMENT_ID)),
        ToolDef::new("update_reservation_passengers", "Update the passenger information of a reservation.")
            .req("reservation_id", s(RESERVATION_ID))
            .req("passengers", passengers_schema()),
        ToolDef::new("get_flight_status", "Get the status of a flight.")
            .req("flight_number", s("The flight number."))
            .req("date", s("The date of the flight.")),
    ]
}

fn json_of<T: Serialize>(v: &T) -> Ret {
    Ret::Json(serde_json::to_value(v).unwrap_or(Value::Null))
}

type R<T> = std::result::Result<T, String>;

fn get_user<'d>(db: &'d FlightDb, user_id: &Value) -> R<&'d User> {
    key(user_id)
        .and_then(|k| db.users.get(k))
        .map(|u| &**u)
        .ok_or_else(|| format!("User {} not found", py_str(user_id)))
}

fn get_reservation<'d>(db: &'d FlightDb, id: &Value) -> R<&'d Reservation> {
    key(id)
        .and_then(|k| db.reservations.get(k))
        .map(|r| &**r)
        .ok_or_else(|| format!("Reservation {} not found", py_str(id)))
}

fn get_flight<'d>(db: &'d FlightDb, number: &Value) -> R<&'d Flight> {
    key(number)
        .and_then(|k| db.flights.get(k))
        .map(|f| &**f)
        .ok_or_else(|| format!("Flight {} not found", py_str(number)))
}

fn get_flight_instance<'d>(
    db: &'d FlightDb,
    number: &Value,
    date: &Value,
) -> R<&'d FlightDateStatus> {
    let flight = get_flight(db, number)?;
    key(date).and_then(|d| flight.dates.get(d)).ok_or_else(|| {
        format!(
            "Flight {} not found on date {}",
            py_str(number),
            py_str(date)
        )
    })
}

/// `Class(**d)` for every item of a list of dicts, as pydantic does it: a
/// non-dict item fails on the first attribute the class reads.
fn list_of<T>(
    v: &Value,
    class: &'static str,
    first_attr: &str,
    build: impl Fn(&mut Validator) -> T,
) -> R<Vec<T>> {
    let items = pycall::list(v)?;
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        let Value::Object(m) = item else {
            return Err(format!(
                "'{}' object has no attribute '{first_attr}'",
                super::pyjson::py_type_name(item)
            ));
        };
        let mut val = Validator::new(class, m);
        let built = build(&mut val);
        val.finish()?;
        out.push(built);
    }
    Ok(out)
}

/// `FlightInfo(**d)` for every item of a list of dicts: (flight number, date).
fn flight_infos(v: &Value) -> R<Vec<(String, String)>> {
    list_of(v, "FlightInfo", "flight_number", |val| {
        (val.string("flight_number"), val.string("date"))
    })
}

/// `Passenger(**d)` for every item of a list of dicts.
fn passengers(v: &Value) -> R<Vec<Passenger>> {
    list_of(v, "Passenger", "first_name", |val| Passenger {
        first_name: val.string("first_name"),
        last_name: val.string("last_name"),
        dob: val.string("dob"),
    })
}

/// `Payment(**d)` for every item of a list of dicts.
fn payments(v: &Value) -> R<Vec<Payment>> {
    list_of(v, "Payment", "payment_id", |val| Payment {
        payment_id: val.string("payment_id"),
        amount: val.int("amount"),
    })
}

/// Run an airline tool (arguments already bound).
pub(crate) fn call(db: &mut FlightDb, name: &str, a: &Map<String, Value>) -> ToolRes {
    let arg = |k: &str| a.get(k).unwrap_or(&Value::Null);
    match name {
        "book_reservation" => book_reservation(db, a),
        "calculate" => super::calc::calculate(arg("expression")).map(Ret::Text),
        "cancel_reservation" => {
            let rid = get_reservation(db, arg("reservation_id"))?
                .reservation_id
                .clone();
            let r = get_mut(&mut db.reservations, &rid).expect("reservation exists");
            let refunds: Vec<Payment> = r
                .payment_history
                .iter()
                .map(|p| Payment {
                    payment_id: p.payment_id.clone(),
                    amount: -p.amount,
                })
                .collect();
            r.payment_history.extend(refunds);
            r.status = Some("cancelled".into());
            Ok(json_of(r))
        }
        "get_reservation_details" => Ok(json_of(get_reservation(db, arg("reservation_id"))?)),
        "get_user_details" => Ok(json_of(get_user(db, arg("user_id"))?)),
        "list_all_airports" => {
            let airports = [
                ("SFO", "San Francisco"),
                ("JFK", "New York"),
                ("LAX", "Los Angeles"),
                ("ORD", "Chicago"),
                ("DFW", "Dallas"),
                ("DEN", "Denver"),
                ("SEA", "Seattle"),
                ("ATL", "Atlanta"),
                ("MIA", "Miami"),
                ("BOS", "Boston"),
                ("PHX", "Phoenix"),
                ("IAH", "Houston"),
                ("LAS", "Las Vegas"),
                ("MCO", "Orlando"),
                ("EWR", "Newark"),
                ("CLT", "Charlotte"),
                ("MSP", "Minneapolis"),
                ("DTW", "Detroit"),
                ("PHL", "Philadelphia"),
                ("LGA", "LaGuardia"),
            ];
            Ok(Ret::Json(Value::Array(
                airports
                    .iter()
                    .map(|(iata, city)| json!({"iata": iata, "city": city}))
                    .collect(),
            )))
        }
        "search_direct_flight" => {
            let found = search_direct(
                db,
                arg("date"),
                opt(arg("origin")),
                opt(arg("destination")),
                None,
            );
            Ok(Ret::Json(Value::Array(
                found.into_iter().map(|f| direct_json(&f, None)).collect(),
            )))
        }
        "search_onestop_flight" => {
            search_onestop(db, arg("origin"), arg("destination"), arg("date"))
        }
        "send_certificate" => {
            let user_id = get_user(db, arg("user_id"))?.user_id.clone();
            let amount_arg = arg("amount");
            let user = get_mut(&mut db.users, &user_id).expect("user exists");
            for n in [3221322, 3221323, 3221324] {
                let pid = format!("certificate_{n}");
                if !user.payment_methods.contains_key(&pid) {
                    let mut input = Map::new();
                    input.insert("amount".into(), amount_arg.clone());
                    let mut val = Validator::new("Certificate", &input);
                    let amount = val.float("amount");
                    val.finish()?;
                    user.payment_methods.insert(
                        pid.clone(),
                        PaymentMethod::Certificate {
                            id: pid.clone(),
                            amount,
                        },
                    );
                    return Ok(Ret::Text(format!(
                        "Certificate {pid} added to user {} with amount {}.",
                        py_str(arg("user_id")),
                        py_str(amount_arg)
                    )));
                }
            }
            Err("Too many certificates".into())
        }
        "transfer_to_human_agents" => Ok(Ret::Text("Transfer successful".into())),
        "update_reservation_baggages" => {
            let r = get_reservation(db, arg("reservation_id"))?;
            let rid = r.reservation_id.clone();
            let uid = r.user_id.clone();
            get_user(db, &Value::String(uid.clone()))?;
            let nonfree = pycall::arith_int(arg("nonfree_baggages"), "-", "int")?;
            let total_bags = pycall::arith_int(arg("total_baggages"), "=", "int")?;
            let total_price = 50 * (nonfree - r.nonfree_baggages).max(0);
            let payment = payment_for_update(db, &uid, arg("payment_id"), total_price)?;
            let r = get_mut(&mut db.reservations, &rid).expect("reservation exists");
            if let Some(p) = payment {
                r.payment_history.push(p);
            }
            r.total_baggages = total_bags;
            r.nonfree_baggages = nonfree;
            Ok(json_of(r))
        }
        "update_reservation_flights" => update_reservation_flights(db, a),
        "update_reservation_passengers" => {
            let new = passengers(arg("passengers"))?;
            let rid = get_reservation(db, arg("reservation_id"))?
                .reservation_id
                .clone();
            let r = get_mut(&mut db.reservations, &rid).expect("reservation exists");
            if new.len() != r.passengers.len() {
                return Err("Number of passengers does not match".into());
            }
            r.passengers = new;
            Ok(json_of(r))
        }
        "get_flight_status" => {
            let inst = get_flight_instance(db, arg("flight_number"), arg("date"))?;
            Ok(Ret::Text(inst.status().to_string()))
        }
        other => Err(format!("Tool '{other}' not found.")),
    }
}

/// A JSON `null` argument is Python's `None`.
fn opt(v: &Value) -> Option<&Value> {
    if v.is_null() {
        None
    } else {
        Some(v)
    }
}

/// τ²'s `_search_direct_flight`: available flights on `date`, optionally filtered.
fn search_direct<'d>(
    db: &'d FlightDb,
    date: &Value,
    origin: Option<&Value>,
    destination: Option<&Value>,
    leave_after: Option<&str>,
) -> Vec<(&'d Flight, &'d FlightDateStatus)> {
    let mut out = Vec::new();
    let Some(date) = key(date) else {
        return out;
    };
    for flight in db.flights.values() {
        if let Some(o) = origin {
            if key(o) != Some(flight.origin.as_str()) {
                continue;
            }
        }
        if let Some(d) = destination {
            if key(d) != Some(flight.destination.as_str()) {
                continue;
            }
        }
        let Some(inst) = flight.dates.get(date) else {
            continue;
        };
        if !matches!(inst, FlightDateStatus::Available { .. }) {
            continue;
        }
        if let Some(after) = leave_after {
            if flight.scheduled_departure_time_est.as_str() < after {
                continue;
            }
        }
        out.push((&**flight, inst));
    }
    out
}

/// τ²'s `DirectFlight` model dump.
fn direct_json(f: &(&Flight, &FlightDateStatus), date: Option<&str>) -> Value {
    let (flight, inst) = f;
    let (seats, prices) = match inst {
        FlightDateStatus::Available {
            available_seats,
            prices,
        } => (available_seats.clone(), prices.clone()),
        _ => (IndexMap::new(), IndexMap::new()),
    };
    json!({
        "flight_number": flight.flight_number,
        "origin": flight.origin,
        "destination": flight.destination,
        "status": "available",
        "scheduled_departure_time_est": flight.scheduled_departure_time_est,
        "scheduled_arrival_time_est": flight.scheduled_arrival_time_est,
        "date": date,
        "available_seats": seats,
        "prices": prices,
    })
}

fn search_onestop(db: &FlightDb, origin: &Value, destination: &Value, date: &Value) -> ToolRes {
    let mut results = Vec::new();
    let first_legs = search_direct(db, date, Some(origin), None, None);
    let date_s = key(date).unwrap_or_default().to_string();
    for leg1 in first_legs {
        let date2 = if leg1.0.scheduled_arrival_time_est.contains("+1") {
            let tail: String = {
                let chars: Vec<char> = date_s.chars().collect();
                chars[chars.len().saturating_sub(2)..].iter().collect()
            };
            let day: i64 = tail.trim().parse().map_err(|_| {
                format!(
                    "invalid literal for int() with base 10: {}",
                    super::pyjson::str_repr(&tail)
                )
            })?;
            format!("2024-05-{}", day + 1)
        } else {
            date_s.clone()
        };
        let dest1 = Value::String(leg1.0.destination.clone());
        let leg1_json = direct_json(&leg1, Some(&date_s));
        for leg2 in search_direct(
            db,
            &Value::String(date2.clone()),
            Some(&dest1),
            Some(destination),
            Some(&leg1.0.scheduled_arrival_time_est),
        ) {
            results.push(Value::Array(vec![
                leg1_json.clone(),
                direct_json(&leg2, Some(&date2)),
            ]));
        }
    }
    Ok(Ret::Json(Value::Array(results)))
}

/// τ²'s `_payment_for_update`: check and charge a payment method for a change.
fn payment_for_update(
    db: &mut FlightDb,
    user_id: &str,
    payment_id: &Value,
    total_price: i64,
) -> R<Option<Payment>> {
    let user =
        get_mut(&mut db.users, user_id).ok_or_else(|| format!("User {user_id} not found"))?;
    let Some(pm) = key(payment_id).and_then(|k| user.payment_methods.get_mut(k)) else {
        return Err("Payment method not found".into());
    };
    match pm {
        PaymentMethod::Certificate { .. } => {
            return Err("Certificate cannot be used to update reservation".into())
        }
        PaymentMethod::GiftCard { amount, .. } => {
            if *amount < total_price as f64 {
                return Err("Gift card balance is not enough".into());
            }
            *amount -= total_price as f64;
        }
        PaymentMethod::CreditCard { .. } => {}
    }
    Ok((total_price != 0).then(|| Payment {
        payment_id: py_str(payment_id),
        amount: total_price,
    }))
}

fn book_reservation(db: &mut FlightDb, a: &Map<String, Value>) -> ToolRes {
    let arg = |k: &str| a.get(k).unwrap_or(&Value::Null);
    let flights = flight_infos(arg("flights"))?;
    let pax = passengers(arg("passengers"))?;
    let pays = payments(arg("payment_methods"))?;
    let user_id = get_user(db, arg("user_id"))?.user_id.clone();
    let reservation_id = ["HATHAT", "HATHAU", "HATHAV"]
        .into_iter()
        .find(|id| !db.reservations.contains_key(*id))
        .ok_or("Too many reservations")?
        .to_string();
    let mut val = Validator::new("Reservation", a);
    let origin = val.string("origin");
    let destination = val.string("destination");
    let flight_type = val.literal("flight_type", &["round_trip", "one_way"]);
    let cabin = val.literal("cabin", &CABINS);
    let total_baggages = val.int("total_baggages");
    let nonfree_baggages = val.int("nonfree_baggages");
    let insurance = val.literal("insurance", &["yes", "no"]);
    val.finish()?;
    let mut reservation = Reservation {
        reservation_id: reservation_id.clone(),
        user_id: user_id.clone(),
        origin,
        destination,
        flight_type,
        cabin: cabin.clone(),
        flights: Vec::new(),
        passengers: pax.clone(),
        payment_history: pays.clone(),
        created_at: "2024-05-15T15:00:00".into(),
        total_baggages,
        nonfree_baggages,
        insurance: insurance.clone(),
        status: None,
    };
    let n = pax.len() as i64;
    let mut total_price: i64 = 0;
    let mut booked: Vec<(String, String)> = Vec::new();
    for (number, date) in &flights {
        let nv = Value::String(number.clone());
        let flight = get_flight(db, &nv)?;
        let inst = get_flight_instance(db, &nv, &Value::String(date.clone()))?;
        let FlightDateStatus::Available {
            available_seats,
            prices,
        } = inst
        else {
            return Err(format!("Flight {number} not available on date {date}"));
        };
        let seats = *available_seats
            .get(&cabin)
            .ok_or_else(|| py_repr(&Value::String(cabin.clone())))?;
        if seats < n {
            return Err(format!("Not enough seats on flight {number}"));
        }
        let price = *prices
            .get(&cabin)
            .ok_or_else(|| py_repr(&Value::String(cabin.clone())))?;
        reservation.flights.push(ReservationFlight {
            flight_number: number.clone(),
            origin: flight.origin.clone(),
            destination: flight.destination.clone(),
            date: date.clone(),
            price,
        });
        booked.push((number.clone(), date.clone()));
        total_price += price * n;
    }
    if insurance == "yes" {
        total_price += 30 * n;
    }
    total_price += 50 * nonfree_baggages;
    let user = &db.users[&user_id];
    for p in &pays {
        let Some(pm) = user.payment_methods.get(&p.payment_id) else {
            return Err(format!("Payment method {} not found", p.payment_id));
        };
        if let PaymentMethod::GiftCard { amount, .. } | PaymentMethod::Certificate { amount, .. } =
            pm
        {
            if *amount < p.amount as f64 {
                return Err(format!(
                    "Not enough balance in payment method {}",
                    p.payment_id
                ));
            }
        }
    }
    let total_payment: i64 = pays.iter().map(|p| p.amount).sum();
    if total_payment != total_price {
        return Err(format!(
            "Payment amount does not add up, total price is {total_price}, but paid {total_payment}"
        ));
    }
    {
        let user = get_mut(&mut db.users, &user_id).expect("user exists");
        for p in &pays {
            match user.payment_methods.get_mut(&p.payment_id) {
                Some(PaymentMethod::GiftCard { amount, .. }) => *amount -= p.amount as f64,
                Some(PaymentMethod::Certificate { .. }) => {
                    user.payment_methods.shift_remove(&p.payment_id);
                }
                _ => {}
            }
        }
    }
    for (number, date) in &booked {
        let flight = get_mut(&mut db.flights, number).expect("flight exists");
        if let Some(FlightDateStatus::Available {
            available_seats, ..
        }) = flight.dates.get_mut(date)
        {
            if let Some(seats) = available_seats.get_mut(&cabin) {
                *seats -= n;
            }
        }
    }
    let out = json_of(&reservation);
    db.reservations
        .insert(reservation_id.clone(), std::sync::Arc::new(reservation));
    get_mut(&mut db.users, &user_id)
        .expect("user exists")
        .reservations
        .push(reservation_id);
    Ok(out)
}

fn update_reservation_flights(db: &mut FlightDb, a: &Map<String, Value>) -> ToolRes {
    let arg = |k: &str| a.get(k).unwrap_or(&Value::Null);
    let infos = flight_infos(arg("flights"))?;
    let r = get_reservation(db, arg("reservation_id"))?;
    let rid = r.reservation_id.clone();
    let uid = r.user_id.clone();
    get_user(db, &Value::String(uid.clone()))?;
    let cabin_v = arg("cabin");
    let cabin = key(cabin_v);
    let n = r.passengers.len() as i64;
    let mut total_price: i64 = 0;
    let mut new_flights = Vec::new();
    for (number, date) in &infos {
        if let Some(existing) = r.flights.iter().find(|f| {
            &f.flight_number == number && &f.date == date && cabin == Some(r.cabin.as_str())
        }) {
            total_price += existing.price * n;
            new_flights.push(existing.clone());
            continue;
        }
        let nv = Value::String(number.clone());
        let flight = get_flight(db, &nv)?;
        let inst = get_flight_instance(db, &nv, &Value::String(date.clone()))?;
        let FlightDateStatus::Available {
            available_seats,
            prices,
        } = inst
        else {
            return Err(format!("Flight {number} not available on date {date}"));
        };
        let seats = *cabin
            .and_then(|c| available_seats.get(c))
            .ok_or_else(|| py_repr(cabin_v))?;
        if seats < n {
            return Err(format!("Not enough seats on flight {number}"));
        }
        let price = *cabin
            .and_then(|c| prices.get(c))
            .ok_or_else(|| py_repr(cabin_v))?;
        total_price += price * n;
        new_flights.push(ReservationFlight {
            flight_number: number.clone(),
            origin: flight.origin.clone(),
            destination: flight.destination.clone(),
            date: date.clone(),
            price,
        });
    }
    total_price -= r.flights.iter().map(|f| f.price).sum::<i64>() * n;
    let payment = payment_for_update(db, &uid, arg("payment_id"), total_price)?;
    let r = get_mut(&mut db.reservations, &rid).expect("reservation exists");
    if let Some(p) = payment {
        r.payment_history.push(p);
    }
    r.flights = new_flights;
    r.cabin = match cabin_v {
        Value::String(c) => c.clone(),
        other => py_str(other),
    };
    Ok(json_of(r))
}
